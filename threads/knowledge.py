"""The knowledge store: the business's own documents as versioned passages, and their search.

A source (a name, such as the file path `help/fees.md`) is split into passages: Markdown at
its headings, plain text at its blank lines (`split_passages`). Each passage keeps a title,
its text, a version and the hash of both (revision `0013_knowledge`). Re-adding a source
matches its new passages to the stored ones: the same text keeps its row as it is, the same
title with a new text keeps the id and gets the next version, the rest are new, and stored
passages left unmatched are deleted. So an id cited in an audit row stays the same passage,
and its version (and hash) says which text of it was sent.

Retrieval is a protocol (`PassageRetriever`) in the style of `threads.memory.Retriever`: the
default `FullTextPassageRetriever` uses the databases' own full-text search (SQLite FTS5
bm25 with the title weighted double, PostgreSQL `ts_rank` over a weighted `tsvector`), with
the query words of `threads.memory.query_words`. `retrieve_sync` runs inside a caller's
transaction, so a turn's lookup rides its first read. The vectors of an optional embedding
retriever are kept here too (`knowledge_embedding`, by model and content hash).

Passages belong to a library, named like a profile (revision `0030_profile_data`): a
`KnowledgeStore` reads and writes one library's (`Profile.knowledge_source`, by default the
profile's own name), so a source name is one business's and a turn never reads another
business's documents.
"""

from __future__ import annotations

import array
import functools
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy import Connection, RowMapping
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver import Statement
from frontdesk._driver.tx import run_sync_tx
from frontdesk.errors import InvalidInput
from frontdesk.knowledge import MAX_PASSAGE_CHARS, MAX_SOURCE_CHARS, Passage
from frontdesk.threads._records import check_id, check_text, new_id
from frontdesk.threads.memory import match_query, query_words
from frontdesk.threads.models import DEFAULT_PROFILE, UTCDateTime, utcnow

__all__ = [
    "MAX_SEARCH_LIMIT",
    "PASSAGES_RANKED",
    "FullTextPassageRetriever",
    "KnowledgeStore",
    "Passage",
    "PassageRetriever",
    "Section",
    "split_passages",
]

MAX_SEARCH_LIMIT = 100
"""Most passages one search returns."""

_meta = sa.MetaData()
passage_table = sa.Table(
    "knowledge_passage",
    _meta,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("id", sa.String(36), nullable=False),
    sa.Column("source", sa.String(255), nullable=False),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("title", sa.Text, nullable=False),
    sa.Column("text", sa.Text, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("profile", sa.String(64), nullable=False),
)
embedding_table = sa.Table(
    "knowledge_embedding",
    _meta,
    sa.Column("model", sa.String(255), primary_key=True),
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("dimensions", sa.Integer, nullable=False),
    sa.Column("vector", sa.LargeBinary, nullable=False),
)
_p = passage_table
_COLUMNS = [_p.c.id, _p.c.source, _p.c.title, _p.c.text, _p.c.version, _p.c.sha256]


# -- splitting ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Section:
    """One passage of a source before it is stored."""

    title: str
    text: str

    @property
    def sha256(self) -> str:
        """The hash of the title and the text (what identifies this exact passage)."""
        return _digest(self.title, self.text)


def _digest(title: str, text: str) -> str:
    return hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()


_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_MARKDOWN_SUFFIXES = (".md", ".markdown", ".mdx")
_TITLE_WORDS = 12


def split_passages(source: str, text: str) -> list[Section]:
    """`text` as passages: Markdown sections (at `#` headings, fenced code kept whole) when
    `source` names a Markdown file or the text has a heading, else paragraphs.

    A heading with no text under it gives no passage; text before the first heading is a
    passage titled with the source's name; a section over `MAX_PASSAGE_CHARS` is split at
    its paragraphs into parts titled `Title (part 2)`...
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    sections = _markdown(source, lines)
    if sections is None:
        sections = [
            (_first_words(p), p) for p in (" ".join(b.split()) for b in _blocks(lines)) if p
        ]
    return [part for title, body in sections for part in _parts(title, body)]


def _markdown(source: str, lines: Sequence[str]) -> list[tuple[str, str]] | None:
    """The sections of a Markdown text, or `None` when it has no heading and `source` is not
    a Markdown file's name."""
    sections: list[tuple[str, list[str]]] = [(source, [])]
    fence: str | None = None
    headings = 0
    for line in lines:
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1)[0] == fence[0] and len(opened.group(1)) >= len(fence):
                fence = None
            sections[-1][1].append(line)
            continue
        if opened:
            fence = opened.group(1)
        heading = _HEADING.match(line) if fence is None else None
        if heading is not None:
            headings += 1
            sections.append((heading.group(2).strip() or source, []))
        else:
            sections[-1][1].append(line)
    if not headings and not source.lower().endswith(_MARKDOWN_SUFFIXES):
        return None
    found = [(title, "\n".join(body).strip()) for title, body in sections]
    return [(" ".join(title.split()), body) for title, body in found if body]


def _blocks(lines: Iterable[str]) -> list[str]:
    """Lines grouped at blank lines."""
    blocks: list[list[str]] = [[]]
    for line in lines:
        if line.strip():
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return ["\n".join(b) for b in blocks if b]


def _first_words(paragraph: str) -> str:
    words = paragraph.split()
    title = " ".join(words[:_TITLE_WORDS])
    return title + (" ..." if len(words) > _TITLE_WORDS else "")


def _parts(title: str, body: str) -> list[Section]:
    """One section, or its paragraphs grouped into parts when it is over the size."""
    if len(body) <= MAX_PASSAGE_CHARS:
        return [Section(title=title, text=body)]
    parts: list[list[str]] = [[]]
    size = 0
    for block in _blocks(body.split("\n")):
        for piece in _pieces(block):
            if parts[-1] and size + len(piece) > MAX_PASSAGE_CHARS:
                parts.append([])
                size = 0
            parts[-1].append(piece)
            size += len(piece) + 2
    return [
        Section(title=title if i == 0 else f"{title} (part {i + 1})", text="\n\n".join(p))
        for i, p in enumerate(parts)
    ]


def _pieces(block: str) -> list[str]:
    """A paragraph, cut at spaces when it alone is over the size."""
    pieces: list[str] = []
    while len(block) > MAX_PASSAGE_CHARS:
        cut = block.rfind(" ", 0, MAX_PASSAGE_CHARS)
        cut = cut if cut > 0 else MAX_PASSAGE_CHARS
        pieces.append(block[:cut].rstrip())
        block = block[cut:].lstrip()
    return [*pieces, block] if block else pieces


# -- retrieval ----------------------------------------------------------------------------


class PassageRetriever(Protocol):
    """Finds the passages for one question, best first.

    The default is `FullTextPassageRetriever`; an embedding retriever implements the same
    method (see `frontdesk.orchestrator.knowledge.HybridRetriever`).
    """

    async def retrieve(self, query: str, *, limit: int) -> list[Passage]:
        """At most `limit` passages, the most relevant to `query` first (each with its
        `score`); none when no word of `query` matches."""
        ...


class FullTextPassageRetriever:
    """The databases' own full-text search: SQLite FTS5 (bm25), PostgreSQL `ts_rank`."""

    def __init__(self, store: KnowledgeStore) -> None:
        self.store = store

    async def retrieve(self, query: str, *, limit: int) -> list[Passage]:
        """The passages of the store's library matching `query`'s words, best first (one
        read)."""

        def work(conn: Connection) -> list[Passage]:
            return self.retrieve_sync(conn, query, limit=limit)

        return await run_sync_tx(self.store.engine, work, readonly=True)

    def retrieve_sync(self, conn: Connection, query: str, *, limit: int) -> list[Passage]:
        """`retrieve` inside a transaction of the caller's (a turn's first one)."""
        words = query_words(query)
        if not words or limit <= 0:
            return []
        dialect = conn.dialect.name
        params = {
            "query": match_query(words, dialect),
            "every": match_query(words, dialect, every=True),
            "limit": limit,
            "library": self.store.library,
        }
        rows = _matches(PASSAGES_RANKED).rows(conn, params)
        return [_passage(row, score=float(row["score"])) for row in rows]


PASSAGES_RANKED = 200
"""How many of the passages matching all of a question's words, and how many of those
matching any of them, are ranked (each, in the index's order). Ranking every match costs a
lookup time linear in the library's size once common words ("card", "account") match a
fixed share of it; a library this size or smaller has every match ranked, as before."""


def _ranking(dialect: str, cap: int) -> sa.TextClause:
    """The best `:limit` of the candidates, best first, scored higher-is-better: at most
    `cap` passages matching `:every` (all the words) and `cap` matching `:query` (any),
    each scored against `:query` (so a passage in both has one score).

    `cap` is written into the SQL: PostgreSQL's generic plan of a prepared statement, not
    knowing a bound LIMIT, would scan the table instead of the GIN index."""
    columns = ", ".join(f"p.{c.name}" for c in _COLUMNS)
    if dialect == "postgresql":
        # The GIN index finds the matches; the LIMITs stop reading their rows (and
        # `ts_rank`, which reads a row's `tsvector`, runs on the candidates only).
        candidates = (
            f"SELECT {columns}, p.position, ts_rank(p.tsv, q) AS score"
            " FROM to_tsquery('english', :query) q, to_tsquery('english', :{}) a,"
            " knowledge_passage p"
            f" WHERE p.tsv @@ a AND p.profile = :library LIMIT {cap:d}"
        )
        return sa.text(
            f"({candidates.format('every')}) UNION ({candidates.format('query')})"
            " ORDER BY score DESC, source, position LIMIT :limit"
        )
    # FTS5 reads its matches in rowid order, so a LIMIT on that order stops the scan and
    # bm25 (lower for a better match; the title, column 0, weighs twice the text) is
    # computed for the candidates only.
    candidates = (
        "SELECT * FROM (SELECT knowledge_fts.rowid AS seq, bm25(knowledge_fts, 2.0, 1.0)"
        " AS rank FROM knowledge_fts JOIN knowledge_passage p ON p.seq = knowledge_fts.rowid"
        " WHERE knowledge_fts MATCH :{} AND p.profile = :library"
        f" ORDER BY knowledge_fts.rowid DESC LIMIT {cap:d})"
    )
    return sa.text(
        f"SELECT {columns}, -c.rank AS score FROM (SELECT seq, min(rank) AS rank FROM"
        f" ({candidates.format('every')} UNION ALL {candidates.format('query')})"
        " GROUP BY seq) c JOIN knowledge_passage p ON p.seq = c.seq"
        " ORDER BY c.rank, p.source, p.position LIMIT :limit"
    )


@functools.cache
def _matches(cap: int) -> Statement:
    """The lookup for `cap` candidates of each kind, built once, and run on the SQLite
    writer's driver in a turn's first transaction (the lookup is in every turn of an app
    with knowledge): see `frontdesk._driver.Statement`."""
    return Statement(_ranking("sqlite", cap), postgresql=_ranking("postgresql", cap))


def _passage(row: RowMapping | Mapping[str, Any], *, score: float = 0.0) -> Passage:
    return Passage(
        id=row["id"],
        source=row["source"],
        title=row["title"],
        text=row["text"],
        version=row["version"],
        sha256=row["sha256"],
        score=score,
    )


# -- the store ----------------------------------------------------------------------------


def _check_source(source: str) -> str:
    check_id(source, "knowledge source")
    if source != source.strip():
        raise InvalidInput(f"knowledge source {source!r} has spaces at its ends; remove them")
    return source


def _lock_sources(conn: Connection) -> None:
    """Serialise writes of the knowledge (SQLite's `BEGIN IMMEDIATE` already does)."""
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('frontdesk:knowledge'))"))


class KnowledgeStore:
    """One library's passages in the conversation database (`knowledge_passage`)."""

    def __init__(self, engine: AsyncEngine, library: str = DEFAULT_PROFILE) -> None:
        """`engine`: the conversation store's `AsyncEngine` (its database is at head);
        `library`: whose documents these are (a profile's name, `Profile.knowledge_source`)."""
        self.engine = engine
        self.library = library

    async def add(self, source: str, text: str) -> list[Passage]:
        """Store `text` as the passages of `source`, replacing what it held; returns them
        in their order (unchanged passages keep their id and version, changed ones keep
        their id and get the next version).

        Raises:
            InvalidInput: a bad source name, text that is empty, too long or unstorable.
        """
        _check_source(source)
        check_text(text, "knowledge text")
        if len(text) > MAX_SOURCE_CHARS:
            raise InvalidInput(
                f"{source}: {len(text):,} characters, over the {MAX_SOURCE_CHARS:,} one source"
                " may hold; split it into several sources"
            )
        sections = split_passages(source, text)
        if not sections:
            raise InvalidInput(f"{source}: no text to store; to drop the source, remove it instead")
        library = self.library
        return await run_sync_tx(
            self.engine, lambda conn: _replace(conn, library, source, sections)
        )

    async def remove(self, source: str) -> int:
        """Delete every passage of `source`; how many there were (0 for an unknown one)."""
        _check_source(source)

        def work(conn: Connection) -> int:
            _lock_sources(conn)
            done = conn.execute(
                _p.delete().where(_p.c.profile == self.library, _p.c.source == source)
            )
            _drop_orphan_vectors(conn)
            return int(done.rowcount or 0)

        return await run_sync_tx(self.engine, work)

    async def sources(self) -> list[str]:
        """Every source's name, sorted."""

        def work(conn: Connection) -> list[str]:
            query = (
                sa.select(_p.c.source)
                .where(_p.c.profile == self.library)
                .distinct()
                .order_by(_p.c.source)
            )
            return list(conn.execute(query).scalars())

        return await run_sync_tx(self.engine, work, readonly=True)

    async def passages(self, source: str | None = None) -> list[Passage]:
        """The passages of `source` (of every source when `None`), in order."""

        def work(conn: Connection) -> list[Passage]:
            query = (
                sa.select(*_COLUMNS)
                .where(_p.c.profile == self.library)
                .order_by(_p.c.source, _p.c.position)
            )
            if source is not None:
                query = query.where(_p.c.source == source)
            return [_passage(row) for row in conn.execute(query).mappings()]

        return await run_sync_tx(self.engine, work, readonly=True)

    async def stamp(self) -> tuple[int, int, str]:
        """Changes whenever a passage is added, changed or deleted (for caches of them)."""

        def work(conn: Connection) -> tuple[int, int, str]:
            row = conn.execute(
                sa.select(
                    sa.func.count(), sa.func.max(_p.c.seq), sa.func.max(_p.c.updated_at)
                ).where(_p.c.profile == self.library)
            ).one()
            return int(row[0]), int(row[1] or 0), str(row[2])

        return await run_sync_tx(self.engine, work, readonly=True)

    async def vectors(self, model: str) -> dict[str, array.array[float]]:
        """The stored vectors of `model`, by passage hash (of this library's current
        passages only)."""

        def work(conn: Connection) -> dict[str, array.array[float]]:
            e = embedding_table
            mine = sa.select(_p.c.sha256).where(_p.c.profile == self.library)
            rows = conn.execute(
                sa.select(e.c.sha256, e.c.vector).where(e.c.model == model, e.c.sha256.in_(mine))
            )
            found: dict[str, array.array[float]] = {}
            for sha, blob in rows:
                vector = array.array("f")
                vector.frombytes(blob)
                found[sha] = vector
            return found

        return await run_sync_tx(self.engine, work, readonly=True)

    async def save_vectors(self, model: str, vectors: Mapping[str, Sequence[float]]) -> None:
        """Keep `model`'s vectors of passage hashes (an existing one is left as it is)."""
        if not vectors:
            return

        def work(conn: Connection) -> None:
            e = embedding_table
            have = set(
                conn.execute(
                    sa.select(e.c.sha256).where(e.c.model == model, e.c.sha256.in_(list(vectors)))
                ).scalars()
            )
            rows = [
                {
                    "model": model,
                    "sha256": sha,
                    "dimensions": len(vector),
                    "vector": array.array("f", vector).tobytes(),
                }
                for sha, vector in vectors.items()
                if sha not in have
            ]
            if rows:
                conn.execute(e.insert(), rows)

        await run_sync_tx(self.engine, work)


def _replace(
    conn: Connection, library: str, source: str, sections: Sequence[Section]
) -> list[Passage]:
    """Match `sections` to the stored passages of `library`'s `source` and write the
    difference."""
    _lock_sources(conn)
    stored = [
        dict(row)
        for row in conn.execute(
            sa.select(_p.c.seq, _p.c.position, *_COLUMNS)
            .where(_p.c.profile == library, _p.c.source == source)
            .order_by(_p.c.position)
        ).mappings()
    ]
    by_hash: dict[str, list[dict[str, Any]]] = {}
    by_title: dict[str, list[dict[str, Any]]] = {}
    for row in stored:
        by_hash.setdefault(row["sha256"], []).append(row)
        by_title.setdefault(row["title"], []).append(row)
    taken: set[int] = set()

    def take(rows: list[dict[str, Any]] | None) -> dict[str, Any] | None:
        for row in rows or ():
            if row["seq"] not in taken:
                taken.add(row["seq"])
                return row
        return None

    now = utcnow()
    # Same text first (anywhere in the source), so that a moved section is not "changed".
    same = [take(by_hash.get(s.sha256)) for s in sections]
    result: list[Passage] = []
    inserts: list[dict[str, Any]] = []
    for position, (section, unchanged) in enumerate(zip(sections, same, strict=True)):
        values = {"title": section.title, "text": section.text, "sha256": section.sha256}
        if unchanged is not None:
            if unchanged["position"] != position:
                conn.execute(
                    _p.update().where(_p.c.seq == unchanged["seq"]).values(position=position)
                )
            result.append(_passage(unchanged))
            continue
        older = take(by_title.get(section.title))
        if older is not None:  # The same section, rewritten: its id, the next version.
            version = older["version"] + 1
            conn.execute(
                _p.update()
                .where(_p.c.seq == older["seq"])
                .values(**values, position=position, version=version, updated_at=now)
            )
            result.append(_passage({**older, **values, "version": version}))
            continue
        passage_id = new_id()
        inserts.append(
            {
                **values,
                "id": passage_id,
                "source": source,
                "profile": library,
                "position": position,
                "version": 1,
                "created_at": now,
                "updated_at": now,
            }
        )
        result.append(_passage({**values, "id": passage_id, "source": source, "version": 1}))
    gone = [row["seq"] for row in stored if row["seq"] not in taken]
    if gone:
        conn.execute(_p.delete().where(_p.c.seq.in_(gone)))
    if inserts:
        conn.execute(_p.insert(), inserts)
    if gone or any(r is None for r in same):
        _drop_orphan_vectors(conn)
    return result


def _drop_orphan_vectors(conn: Connection) -> None:
    """Vectors of texts no passage holds any more are of no use."""
    e = embedding_table
    conn.execute(e.delete().where(e.c.sha256.not_in(sa.select(_p.c.sha256))))
