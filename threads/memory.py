"""The memory store: facts about a user kept across conversations, and their retrieval.

One row per fact (revision `0008_memory`). Facts with the same key supersede one another:
writing one marks the user's current fact with that key as superseded, in the same
transaction, so the newest wins and a superseded fact is never retrieved. Forgetting
deletes the rows (the fact and the versions it superseded); on SQLite the full-text index
is then merged so that no term of the deleted text is left in it, and the connections'
`secure_delete` overwrites the freed pages.

Retrieval is a protocol (`Retriever`), so an embedding retriever can replace the default
`FullTextRetriever`, which uses the databases' own full-text search (SQLite FTS5,
PostgreSQL `tsvector`): the facts matching the turn's words first (best match first),
then the most recently updated, so that a user with a handful of facts has all of them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, cast

import sqlalchemy as sa
from sqlalchemy import Connection, RowMapping
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver import Statement
from frontdesk._driver.tx import run_sync_tx
from frontdesk.errors import InvalidInput, MemoryNotFound
from frontdesk.memory import (
    MAX_FACT_CHARS,
    MAX_SUMMARY_CHARS,
    SOURCES,
    TRUSTS,
    Memory,
    MemorySource,
    MemoryTrust,
    default_trust,
)
from frontdesk.threads._records import check_id, check_text, new_id
from frontdesk.threads.models import DEFAULT_PROFILE, Conversation, Message, UTCDateTime, utcnow

__all__ = [
    "MAX_FACT_CHARS",
    "FullTextRetriever",
    "Memory",
    "MemoryStore",
    "Retriever",
    "delete_user_memories",
    "idle_conversations",
    "keep_summary_sync",
    "match_query",
    "query_words",
    "summary_key",
]

MAX_KEY_CHARS = 64

_meta = sa.MetaData()
memory_table = sa.Table(
    "memory",
    _meta,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(36), nullable=False),
    sa.Column("user_id", sa.String(255), nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("key", sa.String(255)),
    sa.Column("source", sa.String(32), nullable=False),
    sa.Column("conversation_id", sa.String(255)),
    sa.Column("message_id", sa.String(36)),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("superseded_by", sa.String(36)),
    sa.Column("trust", sa.String(16), nullable=False),
    sa.Column("profile", sa.String(64), nullable=False),
)
_m = memory_table
_COLUMNS = [
    _m.c.id,
    _m.c.user_id,
    _m.c.text,
    _m.c.key,
    _m.c.source,
    _m.c.conversation_id,
    _m.c.message_id,
    _m.c.created_at,
    _m.c.updated_at,
    _m.c.trust,
    _m.c.profile,
]

# Words that match almost every fact carry no relevance.
_STOP = frozenset(
    "a about am an and any are as at be been but by can could did do does for from had has"
    " have he her him his how i i'd i'll i'm i've if in into is it it's its me my no not of"
    " on or our please she so some than that the their them then there they this to too us"
    " was we were what when where which who why will with would you your yes ok okay hi"
    " hello hey thanks thank".split()
)
_WORD = re.compile(r"([^\W_]+)(?:'[^\W_]+)?")
"""A word, the part before an apostrophe captured ("don't": "don")."""
MAX_QUERY_WORDS = 32
MATCHES_SCORED = 200
"""Of the facts a turn's words match, the newest this many are ranked by relevance (so a
lookup costs about the same for 1,000 facts and for 100,000)."""
FACTS_SEARCHED = 1_000
"""On PostgreSQL, the words are matched in the user's newest this many current facts (read
in the order of the index `ix_memory_user_newest`, and no further): a customer has tens."""


def query_words(text: str) -> list[str]:
    """The distinct searchable words of `text` (lower case, no stop words), in order."""
    found = [w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _STOP]
    return list(dict.fromkeys(found))[:MAX_QUERY_WORDS]


def match_query(words: Sequence[str], dialect: str, *, every: bool = False) -> str:
    """`words` as the full-text query that matches any of them (all of them with `every`):
    a `to_tsquery` text on PostgreSQL, an FTS5 `MATCH` of quoted terms on SQLite (a quote
    in a word doubled)."""
    if dialect == "postgresql":
        return (" & " if every else " | ").join(words)
    return (" AND " if every else " OR ").join('"' + w.replace('"', '""') + '"' for w in words)


def _memory(row: RowMapping | Mapping[str, Any]) -> Memory:
    return Memory(
        id=row["id"],
        user_id=row["user_id"],
        text=row["text"],
        key=row["key"],
        source=cast(MemorySource, row["source"]),
        conversation_id=row["conversation_id"],
        message_id=row["message_id"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        trust=cast(MemoryTrust, row["trust"]),
        profile=row["profile"],
    )


def _check_fact(text: str, source: MemorySource = "user") -> str:
    check_text(text, "memory text")
    text = " ".join(text.split())
    if not text:
        raise InvalidInput("a memory needs some text, e.g. 'Prefers replies in Hindi'")
    if source == "conversation_summary":  # A paragraph, not one fact.
        if len(text) > MAX_SUMMARY_CHARS:
            raise InvalidInput(
                f"a conversation summary is at most {MAX_SUMMARY_CHARS} characters"
                f" (got {len(text)})"
            )
        return text
    if len(text) > MAX_FACT_CHARS:
        raise InvalidInput(
            f"a memory is at most {MAX_FACT_CHARS} characters (got {len(text)}); keep one short"
            " fact per memory"
        )
    return text


def normalise_key(key: str | None) -> str | None:
    """`key` as stored: lower case, words joined by `_`; `None` for none or a blank one."""
    if key is None:
        return None
    check_text(key, "memory key")
    cleaned = "_".join(re.findall(r"[^\W_]+", key.lower()))[:MAX_KEY_CHARS]
    return cleaned or None


def _lock_user(conn: Connection, user_id: str) -> None:
    """Serialise writes of one user's facts (SQLite's `BEGIN IMMEDIATE` already does)."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtext(:name))"),
            {"name": f"memory:{user_id}"},
        )


class Retriever(Protocol):
    """Finds the user's current facts for one turn, best first.

    The default is `FullTextRetriever`; an embedding retriever implements the same method.
    A retriever answers for one profile (`Profile(retriever=...)`): it returns only the
    facts of that profile (`MemoryStore(engine, profile=NAME)` reads only those).
    """

    async def retrieve(self, user_id: str, text: str, *, limit: int) -> list[Memory]:
        """At most `limit` current facts of `user_id`, the most relevant to `text` first
        and then the most recently updated (so few facts are all returned)."""
        ...


class FullTextRetriever:
    """The databases' own full-text search: SQLite FTS5 (bm25), PostgreSQL `ts_rank`.

    One statement per turn: the best matches and the newest facts, each at most `limit`,
    of the store's profile only.
    """

    def __init__(self, store: MemoryStore) -> None:
        if store.profile is None:
            raise ValueError("a retriever reads one profile's facts: MemoryStore(profile=NAME)")
        self.store = store
        self.profile: str = store.profile

    async def retrieve(self, user_id: str, text: str, *, limit: int) -> list[Memory]:
        """The facts matching `text`'s words (best first), then the newest (one read)."""

        def work(conn: Connection) -> list[Memory]:
            return self.retrieve_sync(conn, user_id, text, limit=limit)

        return await run_sync_tx(self.store.engine, work, readonly=True)

    def retrieve_sync(
        self, conn: Connection, user_id: str, text: str, *, limit: int
    ) -> list[Memory]:
        """`retrieve` inside a transaction of the caller's."""
        words = query_words(text)
        postgresql = conn.dialect.name == "postgresql"
        params: dict[str, Any] = {
            "user_id": user_id,
            "profile": self.profile,
            "limit": limit,
        }
        if words:
            params["query"] = match_query(words, conn.dialect.name)
        rows = (_RANKED if words else _RECENT).rows(conn, params)
        matched: list[Mapping[str, Any]] = []
        recent: list[Mapping[str, Any]] = []
        for row in rows:
            (matched if row["part"] == 0 else recent).append(row)
        # Best match first (SQLite's bm25 is lower for better, `ts_rank` higher), then
        # the newest; the statement's own order is not kept across its UNION. No fact is
        # in both parts (the statement leaves the matches out of the newest).
        sign = 1 if postgresql else -1
        matched.sort(key=lambda r: (sign * r["score"], r["updated_at"], r["seq"]), reverse=True)
        recent.sort(key=lambda r: (r["updated_at"], r["seq"]), reverse=True)
        return [_memory(row) for row in [*matched, *recent][:limit]]


def _ranking(dialect: str, *, words: bool) -> sa.TextualSelect:
    """The lookup: part 0 the best `:limit` matches of `:query`, part 1 the newest facts
    that are not among them, as many as fill `:limit` (part 1 alone without `words`).

    Only what the turn keeps comes back: a lookup whose matches fill the limit reads no
    recent fact, and no row is decoded only to be dropped."""
    columns = ", ".join(f"m.{c.name}" for c in [_m.c.seq, *_COLUMNS])
    current = "m.user_id = :user_id AND m.profile = :profile AND m.superseded_by IS NULL"
    newest = " ORDER BY m.updated_at DESC, m.seq DESC"
    recent = f"SELECT {columns}, 1 AS part, 0.0 AS score FROM memory m WHERE {current}"
    if not words:
        sql = f"{recent}{newest} LIMIT :limit"
    else:
        if dialect == "postgresql":
            # The newest matches among the user's newest facts are ranked: the index read
            # backwards stops there. The numbers are in the SQL: a prepared statement's
            # generic plan, not knowing them, would read and sort every fact of the user.
            matches = (
                f"SELECT * FROM (SELECT {columns}, 0 AS part, ts_rank(m.tsv, q) AS score"
                f" FROM (SELECT * FROM memory m WHERE {current}{newest}"
                f" LIMIT {FACTS_SEARCHED:d}) m, to_tsquery('english', :query) q"
                f" WHERE m.tsv @@ q{newest} LIMIT {MATCHES_SCORED:d}) m"
                " ORDER BY m.score DESC, m.updated_at DESC LIMIT :limit"
            )
        else:  # bm25 is lower for better; the newest `MATCHES_SCORED` matches are ranked.
            matches = (
                f"SELECT * FROM (SELECT {columns}, 0 AS part, bm25(memory_fts) AS score"
                " FROM memory_fts JOIN memory m ON m.seq = memory_fts.rowid"
                f" WHERE memory_fts MATCH :query AND {current}"
                f" ORDER BY memory_fts.rowid DESC LIMIT {MATCHES_SCORED:d}) m"
                " ORDER BY m.score, m.updated_at DESC LIMIT :limit"
            )
        sql = (
            f"WITH best AS MATERIALIZED ({matches})"
            f" SELECT * FROM best UNION ALL SELECT * FROM ({recent}"
            f" AND m.seq NOT IN (SELECT seq FROM best){newest}"
            " LIMIT :limit - (SELECT count(*) FROM best)) recent"
        )
    typed = [sa.column(c.name, c.type) for c in [_m.c.seq, *_COLUMNS]]
    typed += [sa.column("part", sa.Integer), sa.column("score", sa.Float)]
    return sa.text(sql).columns(*typed)


# Built once, and run on the SQLite reader's driver (`run_sync_tx(readonly=True)`): the
# lookup is in every memory turn, and SQLAlchemy's execution and row decoding of its rows
# (up to 32) cost as much as SQLite's full-text ranking.
_RANKED = Statement(_ranking("sqlite", words=True), postgresql=_ranking("postgresql", words=True))
_RECENT = Statement(_ranking("sqlite", words=False), postgresql=_ranking("postgresql", words=False))


class MemoryStore:
    """A user's facts in the conversation database (`memory` table), as one profile keeps
    them: another profile's facts are never read, written, corrected or forgotten here."""

    def __init__(self, engine: AsyncEngine, profile: str | None = DEFAULT_PROFILE) -> None:
        """`engine`: the conversation store's `AsyncEngine` (its database is at head);
        `profile`: the profile whose facts these are (`None`: every profile's, for the
        reads of an export or a privacy view: such a store writes nothing)."""
        self.engine = engine
        self.profile = profile

    def _writer(self) -> str:
        if self.profile is None:
            raise InvalidInput("a memory is written for one profile: MemoryStore(profile=NAME)")
        return self.profile

    def _mine(self) -> list[sa.ColumnElement[bool]]:
        """The filter that keeps a statement to this store's profile."""
        return [] if self.profile is None else [_m.c.profile == self.profile]

    async def add(
        self,
        user_id: str,
        text: str,
        *,
        key: str | None = None,
        source: MemorySource = "user",
        conversation_id: str | None = None,
        message_id: str | None = None,
        trust: MemoryTrust | None = None,
    ) -> tuple[Memory, list[str]]:
        """Store one fact; returns it and the ids of the facts it superseded.

        The same text (and key) as a current fact of the user refreshes that fact instead
        of storing a copy (a `verified` write makes it `verified`). `trust`: whose word it
        is (`None`: by its source, `frontdesk.memory.default_trust`). A `customer` fact
        supersedes only the customer's facts with its key: a customer's word never
        replaces the business's record.

        Raises:
            InvalidInput: empty or over-long text, a bad key, source, trust or user id.
        """
        written = await self.add_many(
            user_id,
            [(text, key)],
            source=source,
            conversation_id=conversation_id,
            message_id=message_id,
            trust=trust,
        )
        return written[0]

    async def add_many(
        self,
        user_id: str,
        facts: Sequence[tuple[str, str | None]],
        *,
        source: MemorySource,
        conversation_id: str | None = None,
        message_id: str | None = None,
        also: Callable[[Connection], None] | None = None,
        trust: MemoryTrust | None = None,
    ) -> list[tuple[Memory, list[str]]]:
        """Store several `(text, key)` facts in one transaction (see `add`); `also` runs in
        it too (a job's idempotency key, `jobs.store.mark_done`)."""
        check_id(user_id, "user_id")
        if source not in SOURCES:
            raise InvalidInput(f"memory source must be one of {', '.join(SOURCES)}, not {source!r}")
        trust = default_trust(source) if trust is None else trust
        if trust not in TRUSTS:
            raise InvalidInput(
                f"memory trust must be one of {', '.join(TRUSTS)} (customer: the customer said"
                f" it; verified: the business wrote it), not {trust!r}"
            )
        cleaned = [(_check_fact(text, source), normalise_key(key)) for text, key in facts]
        how, profile = trust, self._writer()

        def work(conn: Connection) -> list[tuple[Memory, list[str]]]:
            _lock_user(conn, user_id)
            written = [
                _add(conn, user_id, text, key, source, conversation_id, message_id, how, profile)
                for text, key in cleaned
            ]
            if also is not None:
                also(conn)
            return written

        return await run_sync_tx(self.engine, work)

    async def current(self, user_id: str) -> list[Memory]:
        """The user's current facts (of this store's profile), the most recently updated
        first."""

        def work(conn: Connection) -> list[Memory]:
            rows = conn.execute(
                sa.select(*_COLUMNS)
                .where(_m.c.user_id == user_id, _m.c.superseded_by.is_(None), *self._mine())
                .order_by(_m.c.updated_at.desc(), _m.c.seq.desc())
            ).mappings()
            return [_memory(r) for r in rows]

        return await run_sync_tx(self.engine, work, readonly=True)

    async def correct(self, user_id: str, memory_id: str, text: str) -> Memory:
        """Replace the text of one current fact of the user (its key and id stay).

        Raises:
            MemoryNotFound: no current fact `memory_id` of this user.
            InvalidInput: empty or over-long text.
        """
        text = _check_fact(text)

        def work(conn: Connection) -> Memory:
            _lock_user(conn, user_id)
            now = utcnow()
            done = conn.execute(
                _m.update()
                .where(
                    _m.c.id == memory_id,
                    _m.c.user_id == user_id,
                    _m.c.superseded_by.is_(None),
                    *self._mine(),
                )
                .values(text=text, updated_at=now)
            )
            if done.rowcount == 0:
                raise _not_found(memory_id)
            row = conn.execute(sa.select(*_COLUMNS).where(_m.c.id == memory_id)).mappings().one()
            return _memory(row)

        return await run_sync_tx(self.engine, work)

    async def forget(self, user_id: str, memory_id: str) -> list[str]:
        """Delete one current fact of the user, and the older versions it superseded;
        returns the deleted ids (the fact's first).

        Raises:
            MemoryNotFound: no current fact `memory_id` of this user.
        """

        def work(conn: Connection) -> list[str]:
            _lock_user(conn, user_id)
            row = conn.execute(
                sa.select(_m.c.key, _m.c.profile).where(
                    _m.c.id == memory_id,
                    _m.c.user_id == user_id,
                    _m.c.superseded_by.is_(None),
                    *self._mine(),
                )
            ).first()
            if row is None:
                raise _not_found(memory_id)
            ids = [memory_id]
            if row.key is not None:
                older = conn.execute(
                    sa.select(_m.c.id).where(
                        _m.c.user_id == user_id,
                        _m.c.profile == row.profile,
                        _m.c.key == row.key,
                        _m.c.superseded_by.is_not(None),
                    )
                )
                ids += [r.id for r in older]
            conn.execute(_m.delete().where(_m.c.user_id == user_id, _m.c.id.in_(ids)))
            _purge_index(conn)
            return ids

        return await run_sync_tx(self.engine, work)

    async def forget_all(self, user_id: str) -> tuple[int, list[str]]:
        """Delete every fact of the user (of this store's profile; of every profile for a
        store of `None`); returns how many were current, and every id."""
        profile = self.profile
        return await run_sync_tx(
            self.engine, lambda conn: delete_user_memories(conn, user_id, profile=profile)
        )

    async def idle_conversations(
        self, *, idle_before: datetime, skip_owner_prefix: str, limit: int = 100
    ) -> list[tuple[str, str, str]]:
        """`idle_conversations` in a read of its own."""

        def work(conn: Connection) -> list[tuple[str, str, str]]:
            return idle_conversations(
                conn, idle_before=idle_before, skip_owner_prefix=skip_owner_prefix, limit=limit
            )

        return await run_sync_tx(self.engine, work, readonly=True)

    async def keep_summary(
        self, user_id: str, conversation_id: str, leaf_id: str, text: str, *, erased: str
    ) -> tuple[Memory, list[str]] | None:
        """`keep_summary_sync` in a transaction of its own (the summary is the
        conversation's profile's; this store's profile for one from before profiles).

        Raises:
            InvalidInput: an empty or over-long summary.
        """
        fallback = self.profile or DEFAULT_PROFILE

        def work(conn: Connection) -> tuple[Memory, list[str]] | None:
            return keep_summary_sync(
                conn, user_id, conversation_id, leaf_id, text, erased=erased, fallback=fallback
            )

        return await run_sync_tx(self.engine, work)


def delete_user_memories(
    conn: Connection, user_id: str, *, profile: str | None = None
) -> tuple[int, list[str]]:
    """Delete every fact of the user in `conn`'s transaction: of one profile (`forget_all`)
    or of every profile (`None`: erasure); how many were current, and every id deleted."""
    _lock_user(conn, user_id)
    whose = [_m.c.user_id == user_id]
    if profile is not None:
        whose.append(_m.c.profile == profile)
    rows = conn.execute(sa.select(_m.c.id, _m.c.superseded_by).where(*whose)).all()
    conn.execute(_m.delete().where(*whose))
    if rows:
        _purge_index(conn)
    return sum(1 for r in rows if r.superseded_by is None), [r.id for r in rows]


def _not_found(memory_id: str) -> MemoryNotFound:
    return MemoryNotFound(
        f"no memory {memory_id!r} for this user; list them with `frontdesk memory show USER`"
        " (in Python: `await orch.memories(user_id)`)",
        memory_id=memory_id,
    )


def _purge_index(conn: Connection) -> None:
    """Leave no term of deleted text in the full-text index.

    FTS5 records a delete as a marker in a new segment and keeps the old segments (which
    hold the deleted text's terms) until they are merged; `optimize` merges them all now.
    PostgreSQL's generated column goes with its row.
    """
    if conn.dialect.name == "sqlite":
        conn.execute(sa.text("INSERT INTO memory_fts(memory_fts) VALUES ('optimize')"))


def _add(
    conn: Connection,
    user_id: str,
    text: str,
    key: str | None,
    source: MemorySource,
    conversation_id: str | None,
    message_id: str | None,
    trust: MemoryTrust,
    profile: str,
) -> tuple[Memory, list[str]]:
    now = utcnow()
    same = (
        conn.execute(
            sa.select(*_COLUMNS).where(
                _m.c.user_id == user_id,
                _m.c.profile == profile,
                _m.c.superseded_by.is_(None),
                _m.c.key.is_(None) if key is None else _m.c.key == key,
                sa.func.lower(_m.c.text) == text.lower(),
            )
        )
        .mappings()
        .first()
    )
    if same is not None:  # Said again: the fact is fresher, not new (and verified, if now so).
        kept: MemoryTrust = "verified" if "verified" in (trust, same["trust"]) else "customer"
        conn.execute(_m.update().where(_m.c.id == same["id"]).values(updated_at=now, trust=kept))
        return _memory({**same, "updated_at": now, "trust": kept}), []
    memory_id = new_id()
    superseded: list[str] = []
    if key is not None:
        replaced = [
            _m.c.user_id == user_id,
            _m.c.profile == profile,
            _m.c.key == key,
            _m.c.superseded_by.is_(None),
        ]
        if trust == "customer":  # A customer's word never replaces the business's record.
            replaced.append(_m.c.trust == "customer")
        superseded = [r.id for r in conn.execute(sa.select(_m.c.id).where(*replaced))]
        if superseded:
            conn.execute(_m.update().where(_m.c.id.in_(superseded)).values(superseded_by=memory_id))
    values = {
        "id": memory_id,
        "user_id": user_id,
        "text": text,
        "key": key,
        "source": source,
        "conversation_id": conversation_id,
        "message_id": message_id,
        "created_at": now,
        "updated_at": now,
        "trust": trust,
        "profile": profile,
    }
    conn.execute(_m.insert().values(**values))
    return _memory(values), superseded


# -- summaries of past conversations ------------------------------------------------------

SUMMARY_SOURCE: MemorySource = "conversation_summary"


def summary_key(conversation_id: str) -> str:
    """The key of a conversation's summary memory: a newer summary of the same conversation
    supersedes the older (a digest, since a conversation id may be long or odd)."""
    return "conversation_" + hashlib.sha256(conversation_id.encode()).hexdigest()[:16]


def idle_conversations(
    conn: Connection, *, idle_before: datetime, skip_owner_prefix: str, limit: int
) -> list[tuple[str, str, str]]:
    """`(conversation_id, user_id, leaf_id)` of conversations with an owner whose newest
    message is older than `idle_before` and whose summary memory does not cover it yet,
    the longest idle first (owners starting with `skip_owner_prefix`, erased ones, left out).
    """
    conv, msg = Conversation.__table__, Message.__table__  # type: ignore[attr-defined]
    kept = (
        sa.select(_m.c.seq)
        .where(
            _m.c.source == SUMMARY_SOURCE,
            _m.c.conversation_id == conv.c.id,
            _m.c.message_id == conv.c.active_leaf_id,
        )
        .exists()
    )
    query = (
        sa.select(conv.c.id, conv.c.user_id, conv.c.active_leaf_id)
        .join(msg, msg.c.id == conv.c.active_leaf_id)
        .where(
            conv.c.user_id.is_not(None),
            ~conv.c.user_id.startswith(skip_owner_prefix, autoescape=True),
            msg.c.created_at < idle_before,
            ~kept,
        )
        .order_by(msg.c.created_at)
        .limit(limit)
    )
    return [(r.id, r.user_id, r.active_leaf_id) for r in conn.execute(query)]


def keep_summary_sync(
    conn: Connection,
    user_id: str,
    conversation_id: str,
    leaf_id: str,
    text: str,
    *,
    erased: str,
    fallback: str = DEFAULT_PROFILE,
) -> tuple[Memory, list[str]] | None:
    """Keep `text` as the memory of the conversation up to `leaf_id`, superseding its older
    summary; `None` (nothing written) when the conversation is no longer the user's or its
    leaf was erased meanwhile (`erased`: the erasure marker), so that a summary written
    while the user is being erased never outlives the erasure. The summary belongs to the
    conversation's profile (`fallback` for a conversation from before profiles)."""
    text = _check_fact(text, SUMMARY_SOURCE)
    _lock_user(conn, user_id)
    conv, msg = Conversation.__table__, Message.__table__  # type: ignore[attr-defined]
    still = conn.execute(
        sa.select(conv.c.id, conv.c.profile)
        .join(msg, msg.c.id == leaf_id)
        .where(conv.c.id == conversation_id, conv.c.user_id == user_id, msg.c.content != erased)
    ).first()
    if still is None:
        return None
    key = summary_key(conversation_id)
    profile = still.profile or fallback
    return _add(
        conn, user_id, text, key, SUMMARY_SOURCE, conversation_id, leaf_id, "customer", profile
    )
