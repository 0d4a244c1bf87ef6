"""`AuditLog`: the append-only, hash-chained store of audit events.

One `append` writes one turn's batch in one transaction. The conversation's head row
(last seq and hash) is locked first (`BEGIN IMMEDIATE` on SQLite; on PostgreSQL the
`audit_lock_head` function, `SELECT ... FOR UPDATE` as the tables' owner), so concurrent
writers queue instead of forking the chain, and the `(conversation_id, seq)` unique key
refuses a fork even if the lock were bypassed. On PostgreSQL the head then moves only by
the `audit_event_link` trigger, which also refuses a row that does not continue the chain
(seq = head + 1; migrations `0007_audit_guard`, `0020_audit_narrow`), so the application's
role needs no UPDATE on any audit table.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any, Literal

import structlog
from sqlalchemy import Connection, Engine, bindparam, select, text, union, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from frontdesk._driver import Statement
from frontdesk.audit import blobs, compact, crypto
from frontdesk.audit.chain import (
    GENESIS_HASH,
    ChainProblem,
    ConversationVerdict,
    Head,
    ProblemKind,
    VerifyReport,
    canonical_json,
    check_answers,
    row_hash,
    sha256_text,
    verify_chain,
)
from frontdesk.audit.crypto import DataKeys, KeyProvider, PayloadOpener
from frontdesk.audit.events import AuditEvent
from frontdesk.audit.refs import UNKEYED, UserRefs, load_refs, master_of, read_refs
from frontdesk.audit.spool import Spool
from frontdesk.audit.tables import audit_event, audit_head, audit_prompt
from frontdesk.db import create_engine, dispose_engine, run_read, run_write, writes_to
from frontdesk.errors import AuditConfigError, AuditKeyError, AuditWriteError
from frontdesk.frozen import quick_init
from frontdesk.schema import ensure_schema

log = structlog.get_logger("audit")

OnFailure = Literal["raise", "spool"]

DEFAULT_SPOOL_DIR = Path(".frontdesk-audit-spool")
"""Where `on_failure="spool"` keeps unwritten batches when no `spool_dir` is given."""


@dataclass(frozen=True)
class StoredAuditEvent:
    """One stored audit row, with its place in the chain."""

    conversation_id: str
    seq: int
    event_id: str
    kind: str
    turn_id: str
    created_at: str
    """ISO 8601 in UTC, exactly as hashed."""
    payload_json: str
    """The payload as canonical JSON, exactly as hashed."""
    prompt_sha256: str | None
    prev_hash: str
    """The hash of the row before it as read (not stored: migration `0020_audit_narrow`)."""
    hash: str
    system_prompt: str | None = None
    """The system prompt text (stored once by hash), for `model_attempt` rows."""
    opener: PayloadOpener | None = field(default=None, compare=False, repr=False)
    """Decrypts an encrypted payload (set by `AuditLog.events`)."""
    blobs: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    """The stored values of the blobs the payload refers to (set by `AuditLog.events`)."""
    blob_problem: str | None = field(default=None, compare=False, repr=False)
    """Why a blob the row refers to could not be read back (`audit verify` reports it)."""

    @cached_property
    def payload(self) -> dict[str, Any]:
        """The decoded payload, decrypted and expanded (markers once shredded).

        Raises:
            AuditKeyError: the payload is encrypted and no (or the wrong) master key is set.
        """
        value = self.packed_payload
        if self.blobs is None:
            return value
        return {
            k: v if k in crypto.CLEAR_FIELDS else blobs.expand(v, self.blobs)
            for k, v in value.items()
        }

    @cached_property
    def packed_payload(self) -> dict[str, Any]:
        """The decoded, decrypted payload with its blob references as stored."""
        value: dict[str, Any] = json.loads(self.payload_json)
        if not crypto.is_envelope(value):
            return value
        associated = crypto.aad(self.conversation_id, self.event_id, self.kind)
        if self.opener is None:
            return PayloadOpener(None, {}).open(value, associated)
        return self.opener.open(value, associated)

    @property
    def encrypted(self) -> bool:
        """Whether the row is stored encrypted."""
        return (
            self.payload_json.startswith('{"clear":') and '"enc":"aes-256-gcm"' in self.payload_json
        )

    @property
    def timestamp(self) -> datetime:
        """`created_at` as an aware datetime."""
        return datetime.fromisoformat(self.created_at)


def _packed_refs(event: StoredAuditEvent) -> set[str]:
    """The refs a row's payload holds (none when it is encrypted and cannot be read)."""
    if crypto.is_envelope_text(event.payload_json):
        if event.opener is None:
            return set()
        try:
            payload = event.packed_payload
        except AuditKeyError:
            return set()  # Read without the key: `payload` raises for the caller.
    elif blobs.BLOB not in event.payload_json and blobs.LIST not in event.payload_json:
        return set()
    else:
        payload = event.packed_payload
    return blobs.references({k: v for k, v in payload.items() if k not in crypto.CLEAR_FIELDS})


def _expand_all(
    conn: Connection, events: Sequence[StoredAuditEvent], opener: PayloadOpener | None
) -> None:
    """Load the blobs the rows refer to (level by level) and give each row its values."""
    wanted = {e.event_id: _packed_refs(e) for e in events}
    values: dict[str, Any] = {}
    problems: dict[str, str] = {}
    todo = set().union(*wanted.values()) if wanted else set()
    while todo:
        found = blobs.load(conn, todo)
        later: set[str] = set()
        for ref in todo:
            if ref not in found:
                problems[ref] = f"blob {ref} is missing"
                continue
            kid, body = found[ref]
            text = _blob_text(ref, kid, body, opener, problems)
            if text is None:
                values[ref] = crypto.ERASED
                continue
            values[ref] = json.loads(text)
            later |= blobs.references(values[ref])
        todo = later - values.keys() - problems.keys()
    for event in events:
        refs = wanted[event.event_id]
        if not refs:
            continue
        object.__setattr__(event, "blobs", values)
        bad = sorted(problems[r] for r in refs if r in problems)
        if not bad:
            bad = sorted({problems[r] for r in _closure(refs, values) if r in problems})
        if bad:
            object.__setattr__(event, "blob_problem", bad[0])


def _closure(refs: set[str], values: Mapping[str, Any]) -> set[str]:
    """Every ref reachable from `refs` through the loaded values."""
    seen, todo = set(), set(refs)
    while todo:
        ref = todo.pop()
        seen.add(ref)
        if ref in values:
            todo |= blobs.references(values[ref]) - seen
    return seen


def _blob_text(
    ref: str,
    kid: str | None,
    body: bytes | str,
    opener: PayloadOpener | None,
    problems: dict[str, str],
) -> str | None:
    """A blob's JSON text, checked against its ref (`None`: shredded or unreadable)."""
    if kid is None:
        clear = _stored_text(body)
        if clear == UNREADABLE or blobs.address(clear, None) != ref:
            problems[ref] = f"blob {ref} was edited (its text does not match its address)"
            return None if clear == UNREADABLE else clear
        return clear
    if opener is None:
        return None
    try:
        text = opener.open_blob(kid, ref, body)
    except AuditKeyError as e:
        problems[ref] = str(e)
        return None
    if text is not None:
        key = opener.address_key(kid)
        if key is not None and blobs.address(text, key) != ref:
            problems[ref] = f"blob {ref} is not the value its address names (swapped)"
    return text


def _check_blobs(
    verdict: ConversationVerdict, rows: Sequence[StoredAuditEvent]
) -> ConversationVerdict:
    """`verdict`, or a failing one when a blob a row refers to is missing or edited.

    The chain covers the refs; this checks that what they name is stored as named (clear
    blobs by their hash, sealed ones by decrypting them, so only with the key).
    """
    if not verdict.ok:
        return verdict
    for row in rows:
        if row.blob_problem is not None:
            kind: ProblemKind = "missing" if row.blob_problem.endswith("missing") else "edited"
            problem = ChainProblem(row.seq, kind, f"row seq {row.seq}: {row.blob_problem}")
            return ConversationVerdict(verdict.conversation_id, verdict.rows, problem)
    return verdict


UNREADABLE = "[stored payload does not inflate]"
"""What a row's payload text reads as when its stored bytes are not a stored form (edited):
not JSON, so `audit verify` reports the row as edited."""


_EXPERT = re.compile(r'"expert":"([^"\\]*)"')
"""An attempt's expert in its payload's canonical JSON (the first such key: the clear
fields' own, sorted before any text that could hold one escaped)."""


def _names_one_of(stored: bytes | str, experts: frozenset[str]) -> bool:
    """Whether a `model_attempt` row's payload is a call of one of `experts`, by its
    `expert` key found in the text (no JSON parse: most rows are a turn's own calls)."""
    named = _EXPERT.search(_stored_text(stored))
    return named is not None and named.group(1) in experts


def _stored_text(stored: bytes | str) -> str:
    """A row's payload text from its stored form (`compact`), or `UNREADABLE`."""
    try:
        return compact.inflate(stored)
    except (ValueError, UnicodeDecodeError):
        return UNREADABLE


def hash_bytes(digest: str) -> bytes:
    """A hex row hash in its stored form, 32 raw bytes (half the size of its hex text)."""
    return bytes.fromhex(digest)


def hash_hex(stored: bytes | str) -> str:
    """A stored hash as the hex text the chain and every reader use (text as it is: a
    value stored otherwise, e.g. by hand, is shown and compared unchanged)."""
    return stored if isinstance(stored, str) else bytes(stored).hex()


def id_bytes(value: str, size: int = 16) -> bytes:
    """An id in its stored form: lowercase hex of `size` bytes (a uuid hex, a sha256) as
    those bytes, any other text as its UTF-8 (a byte 0xff added when that is `size` bytes
    too, so the two forms never meet: UTF-8 holds no 0xff). `id_text` reverses it exactly."""
    if len(value) == 2 * size:
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            return _text_bytes(value, size)
        if len(raw) == size and raw.hex() == value:  # Lowercase hex only, no spaces.
            return raw
    return _text_bytes(value, size)


def _text_bytes(value: str, size: int) -> bytes:
    """A text's UTF-8, with a byte 0xff added when it is `size` bytes (the other form's)."""
    raw = value.encode("utf-8", "surrogatepass")
    return raw + b"\xff" if len(raw) == size else raw


def _text_of(raw: bytes) -> str:
    raw = raw[:-1] if raw.endswith(b"\xff") else raw
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # Not written by `_text_bytes` (edited): reads as no id does.
        return raw.decode("utf-8", "backslashreplace")


def id_text(stored: bytes | str | None, size: int = 16) -> str | None:
    """An id as `id_bytes(..., size)` stored it (text as it is: a value put there by hand)."""
    if stored is None or isinstance(stored, str):
        return stored
    raw = bytes(stored)
    return raw.hex() if len(raw) == size else _text_of(raw)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def time_bytes(text: str) -> bytes:
    """`created_at` in its stored form: a canonical UTC timestamp (as `_utc_text` writes
    it) as 8 bytes, big-endian microseconds since 1970; any other text as its UTF-8 (as
    `id_bytes` does). `time_text` reverses it exactly."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return _text_bytes(text, 8)
    if moment.tzinfo is None or _utc_text(moment) != text:
        return _text_bytes(text, 8)
    return ((moment - _EPOCH) // _MICROSECOND).to_bytes(8, "big", signed=True)


def time_text(stored: bytes | str) -> str:
    """`created_at` as `time_bytes` stored it (text as it is: a value put there by hand)."""
    if isinstance(stored, str):
        return stored
    raw = bytes(stored)
    if len(raw) != 8:
        return _text_of(raw)
    try:
        moment = _EPOCH + int.from_bytes(raw, "big", signed=True) * _MICROSECOND
    except OverflowError:  # Not written by `time_bytes` (edited): reads as no time does.
        return raw.hex()
    return moment.isoformat(timespec="microseconds")  # `_utc_text`: it is in UTC already.


PROMPT_DIGEST = 32
"""`prompt_sha256` is stored by `id_bytes` as a sha256 (32 bytes); event and turn ids as
uuid hex (16)."""

GENESIS_BYTES = hash_bytes(GENESIS_HASH)

_HEADS_KEPT = 10_000
"""Conversations whose committed head a log remembers (`AuditLog.ahead`)."""
"""A new head's stored hash (`GENESIS_HASH`, what the first row continues from)."""


def _utc_text(moment: datetime) -> str:
    """The canonical timestamp text (naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    elif moment.tzinfo is not UTC:  # Events are stamped in UTC already: no conversion.
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="microseconds")


def _stamp(moment: datetime) -> tuple[str, bytes]:
    """`_utc_text(moment)` and its stored form (`time_bytes` of it), both made from the
    datetime: a canonical text reads back as this very moment, so it need not be parsed.
    The text is `isoformat()`'s own unless the microseconds are 0 (which it leaves out):
    its `timespec` argument costs a call as much again."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    elif moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    micros = (moment - _EPOCH) // _MICROSECOND
    text = moment.isoformat() if moment.microsecond else moment.isoformat(timespec="microseconds")
    return text, micros.to_bytes(8, "big", signed=True)


@functools.lru_cache(maxsize=256)
def _prompt_digest(text: str) -> str:
    """A system prompt's sha256 (the same few prompts come with every turn, twice)."""
    return sha256_text(text)


def _retryable(error: BaseException) -> bool:
    """Serialization failures, deadlocks and dropped connections are worth one more try."""
    if not isinstance(error, DBAPIError):
        return False
    code = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    return bool(error.connection_invalidated) or code in {"40001", "40P01"}


@dataclass(frozen=True, slots=True)
class Ahead:
    """A batch chained and packed before its transaction (`AuditLog.ahead`): the rows to
    insert and the head they continue, which the writer checks under its lock."""

    conversation_id: str
    head_seq: int
    head_hash: str
    """The head the rows continue (its hash as hex, as `audit_lock_head` returns it)."""
    events: list[dict[str, Any]]
    """The `audit_event` rows, in order."""
    blobs: list[dict[str, Any]]
    """The `audit_blob` rows not known to be stored (inserted unless they are)."""
    written: list[str]
    """The refs of `blobs`, for `AuditLog.committed`."""


@quick_init
@dataclass(frozen=True, kw_only=True)
class _Prepared:
    """An event with its JSON and hash inputs computed before the transaction (made
    `quick_init`'s way: a batch makes one per event, each setting nine fields)."""

    event: AuditEvent
    created_at: str
    payload_json: str
    """Empty when the payload is to be sealed (`split` holds it then)."""
    prompt_sha256: str | None
    split: crypto.Split | None = None
    kid: str | None = None
    """The data key the payload was packed (its blobs are sealed) for (`None`: packed in
    clear, or not packed)."""
    blobs: dict[str, str] = field(default_factory=dict)
    """The blobs the payload refers to: ref -> JSON text (sealed under `kid`, if any)."""
    stored: bytes = b""
    """`payload_json` in its stored form (`compact.deflate`), made with it."""
    created_stored: bytes = b""
    """`created_at` in its stored form (`time_bytes`), made from the event's datetime."""


def spliced_row_hash(
    *,
    conversation_id: str,
    seq: int,
    event_id: str,
    kind: str,
    turn_id: str,
    created_at: str,
    payload_json: str,
    prompt_sha256: str | None,
    prev_hash: str,
) -> str:
    """`audit.chain.row_hash` from the payload's canonical JSON, without parsing it again.

    The row's canonical JSON is its fields' canonical JSON (sorted keys) with the payload's
    own canonical text in its place. When a field other than the payload is not ASCII, the
    whole text might have to be ASCII-escaped (a lone surrogate in the payload), so those
    rare rows take `row_hash` itself.
    """
    ascii_fields = f"{conversation_id}{event_id}{kind}{turn_id}{created_at}{prev_hash}"
    if not ascii_fields.isascii() or not (prompt_sha256 or "").isascii():
        return row_hash(
            conversation_id=conversation_id,
            seq=seq,
            event_id=event_id,
            kind=kind,
            turn_id=turn_id,
            created_at=created_at,
            payload=json.loads(payload_json),
            prompt_sha256=prompt_sha256,
            prev_hash=prev_hash,
        )
    # Keys in sorted order, each value as canonical_json writes it (`seq` is an int).
    prompt = "null" if prompt_sha256 is None else _json_text(prompt_sha256)
    return sha256_text(
        f'{{"conversation_id":{_json_text(conversation_id)},"created_at":{_json_text(created_at)}'
        f',"event_id":{_json_text(event_id)},"kind":{_json_text(kind)},"payload":{payload_json}'
        f',"prev_hash":{_json_text(prev_hash)},"prompt_sha256":{prompt},"seq":{int(seq)}'
        f',"turn_id":{_json_text(turn_id)}}}'
    )


_json_text = encode_basestring
"""A text's JSON as `canonical_json` writes it (`ensure_ascii=False`), without the call."""


@functools.lru_cache(maxsize=256)
def _prompt_json(text: str) -> str:
    """A system prompt's stored JSON text (the same few prompts come with every turn)."""
    return canonical_json(text)


def _head(insert: Any) -> Any:
    """Create the head row if missing and return it (row-locked on PostgreSQL)."""
    upsert = insert(audit_head).values(
        conversation_id=bindparam("conversation_id"), seq=0, hash=GENESIS_BYTES
    )
    return upsert.on_conflict_do_update(
        index_elements=[audit_head.c.conversation_id], set_={"seq": audit_head.c.seq}
    ).returning(audit_head.c.seq, audit_head.c.hash)


# Built once: building a statement costs more than running it. On PostgreSQL the head is
# created and locked by the SECURITY DEFINER function of migration 0007 (the app role may
# not update heads itself); its link trigger moves the head as each row is inserted.
_HEAD = Statement(
    _head(sqlite_insert),
    postgresql=text(
        "SELECT head_seq AS seq, head_hash AS hash FROM audit_lock_head(:conversation_id)"
    ),
)
_PROMPT = Statement(  # Store a prompt text unless it is stored already.
    sqlite_insert(audit_prompt).on_conflict_do_nothing(),
    postgresql=pg_insert(audit_prompt).on_conflict_do_nothing(),
    columns=["sha256", "text_json"],
)
_EVENT_COLUMNS = [c.name for c in audit_event.c]
_INSERT_EVENT = Statement(audit_event.insert(), columns=_EVENT_COLUMNS)
_MOVE_HEAD = Statement(
    update(audit_head)
    .where(audit_head.c.conversation_id == bindparam("conversation"))
    .values(seq=bindparam("seq"), hash=bindparam("hash"))
)
_MOVE_KNOWN_HEAD = Statement(  # SQLite: the head moved only if it is still the one known.
    update(audit_head)
    .where(
        audit_head.c.conversation_id == bindparam("conversation"),
        audit_head.c.seq == bindparam("was_seq"),
        audit_head.c.hash == bindparam("was_hash"),
    )
    .values(seq=bindparam("seq"), hash=bindparam("hash"))
)


async def _ref_key(engine: AsyncEngine, provider: KeyProvider) -> UserRefs:
    """The database's keyed refs: read, or made once (one short write) on a first open."""
    async with engine.connect() as conn:
        found = await conn.run_sync(lambda c: read_refs(c, provider))
    if found is not None:
        return found
    result: UserRefs = await run_write(engine, lambda c: load_refs(c, provider))
    return result


class AuditLog:
    """The audit log of every expert call and turn decision; open it with `AuditLog.open`."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        owns_engine: bool,
        on_failure: OnFailure,
        spool: Spool | None,
        keys: DataKeys | None = None,
        needs_key: bool = False,
        user_refs: UserRefs = UNKEYED,
    ) -> None:
        self._engine = engine
        self._refs = user_refs
        self._owns_engine = owns_engine
        self._on_failure = on_failure
        self._spool = spool
        self._keys = keys
        self._needs_key = needs_key
        self._stored_prompts: set[str] = set()
        """Prompt digests whose text a committed batch wrote (prompts are never deleted),
        so the same few system prompts are inserted once per process, not once per turn."""
        self._address_cache: dict[str | None, blobs.Addresses] = {}
        self._stored = blobs.Stored()
        self._heads: dict[str, tuple[int, str]] = {}
        """conversation -> the head (seq, hash) of its last batch this log saw committed:
        a batch chained ahead of its transaction (`ahead`) continues it, and the server
        refuses the batch when another writer moved the head meanwhile; on SQLite a batch
        chains from it and moves the head only if it is still there (`_write_in`)."""
        self._moved: dict[str, tuple[int, str]] = {}
        """conversation -> the head its batch in a transaction not yet committed moves to."""
        self._joined: Engine | None = None
        """The engine of the last connection `append_sync` found to be this log's own (the
        SQLite writer's private engine, say): every turn's finish asks again (`_writes_to`)."""

    @classmethod
    async def open(
        cls,
        url_or_engine: str | AsyncEngine,
        *,
        on_failure: OnFailure = "raise",
        spool_dir: Path | None = None,
        master_key: bytes | str | KeyProvider | None = None,
    ) -> AuditLog:
        """Open (and if needed create) the audit log.

        Args:
            url_or_engine: A database URL (`sqlite:///PATH`, `sqlite+aiosqlite:///PATH`,
                `postgresql://...`, `postgresql+asyncpg://...`) or an engine to share with
                the conversation store (it is then never disposed here).
            on_failure: `"raise"` fails the turn with `AuditWriteError` when a batch cannot
                be written; `"spool"` keeps it in a local file and writes it later.
            spool_dir: The spool's folder (default `.frontdesk-audit-spool`).
            master_key: Encrypts payloads per user (see `frontdesk.audit.crypto`): 32 raw
                bytes, base64 text, or a `KeyProvider`; `None` reads `FRONTDESK_MASTER_KEY`
                (unset: payloads are stored in clear).

        Raises:
            ConfigError: for an unknown URL form or `on_failure` value.
            AuditKeyError: the master key is malformed, or is not the one that wrapped the
                database's data keys (or its ref key, `frontdesk.audit.refs`).
            SchemaOutdated: the database's schema is older than this code.
        """
        if on_failure not in ("raise", "spool"):
            raise AuditConfigError(f"on_failure must be 'raise' or 'spool', not {on_failure!r}")
        owns = isinstance(url_or_engine, str)
        if isinstance(url_or_engine, str):
            engine = create_engine(url_or_engine)
        else:
            engine = url_or_engine
        try:
            provider = crypto.as_provider(master_key)
            await ensure_schema(engine)
            async with engine.connect() as conn:
                masters = await conn.run_sync(crypto.live_master_ids)
                ref_master = await conn.run_sync(master_of)
        except BaseException:
            if owns:
                await engine.dispose()
            raise
        wrapped_by = masters | ({ref_master} if ref_master else set())
        if provider is not None and wrapped_by - {provider.key_id}:
            if owns:
                await engine.dispose()
            raise AuditKeyError(
                f"the audit master key ({provider.key_id}) is not the one that wrapped this"
                f" database's keys ({', '.join(sorted(wrapped_by))}); set"
                f" {crypto.MASTER_KEY_ENV} to that key (rotate with `frontdesk audit rotate-key`)"
            )
        spool = Spool(spool_dir or DEFAULT_SPOOL_DIR) if on_failure == "spool" else None
        keys = None if provider is None else DataKeys(provider)
        try:
            user_refs = UNKEYED if provider is None else await _ref_key(engine, provider)
        except BaseException:
            if owns:
                await engine.dispose()
            raise
        return cls(
            engine,
            owns_engine=owns,
            on_failure=on_failure,
            spool=spool,
            keys=keys,
            needs_key=bool(masters),
            user_refs=user_refs,
        )

    @property
    def keys(self) -> DataKeys | None:
        """The data keys (when a master key is configured): payloads are then encrypted."""
        return self._keys

    @property
    def refs(self) -> UserRefs:
        """The digests users are filed under: keyed with a master key, plain without one
        (`frontdesk.audit.refs`); erasure and the user's own chain name users by them."""
        return self._refs

    @property
    def needs_key(self) -> bool:
        """Whether the database holds live data keys (so a writer must have the master key)."""
        return self._needs_key

    def check_writable(self) -> None:
        """Refuse to write clear payloads into a database whose payloads are encrypted.

        Raises:
            AuditKeyError: no master key is configured but the database has data keys.
        """
        if self._keys is None and self._needs_key:
            raise AuditKeyError(
                "this database's audit payloads are encrypted (it holds data keys) but no"
                f" master key is set; set {crypto.MASTER_KEY_ENV} (or pass audit_key=)"
            )

    @property
    def engine(self) -> AsyncEngine:
        """The engine the log writes through."""
        return self._engine

    async def __aenter__(self) -> AuditLog:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Release the engine, only if this log created it."""
        if self._owns_engine:
            await dispose_engine(self._engine)

    # Writing.

    async def append(
        self,
        conversation_id: str,
        events: Sequence[AuditEvent],
        *,
        connection: AsyncConnection | None = None,
        user_id: str | None = None,
        in_clear: bool = False,
    ) -> None:
        """Write one batch (one turn's events) in one transaction, chained.

        Args:
            conversation_id: The conversation the events belong to.
            events: The batch, in order.
            user_id: The conversation's owner, whose data key encrypts the payloads
                (`None`: single-user mode, the key of user ""). Unused without a master key.
            in_clear: Store the payloads unencrypted even with a master key: only for
                events that hold no personal content (an `erased` record).
            connection: A connection of this log's engine inside a write transaction the
                caller commits (the turn's last write), so that the batch costs no
                transaction of its own. A failure then propagates as it is, for the caller
                to roll back and append again without it; check `joinable` first.

        Raises:
            AuditWriteError: the write failed and `on_failure` is `"raise"`.
            AuditPayloadError: an event's payload is not JSON (never spooled: a bug to fix).
        """
        if not events:
            return
        if not in_clear:
            self.check_writable()
        prepared = [self._prepare(e, in_clear, user_id) for e in events]
        if connection is not None:
            if not self.joinable(connection.engine):
                raise AuditConfigError(
                    "append(connection=...) needs a connection of the audit log's own engine"
                    " and an empty spool; call append without a connection"
                )
            await connection.run_sync(self._write_in, conversation_id, prepared, False, user_id)
            return
        if self._spool is not None and self._spool.path.exists():
            _, error = await self._spool.drain(self._write_idempotent)
            if error is not None:
                await self._spool_batch(conversation_id, events, error, user_id)
                return
        try:
            await self._write(conversation_id, prepared, idempotent=False, user_id=user_id)
        except (SQLAlchemyError, OSError, TimeoutError) as e:
            if self._spool is None:
                raise AuditWriteError(
                    f"audit write of {len(events)} events for conversation {conversation_id!r}"
                    f" failed ({type(e).__name__}); check the audit database, or open the log"
                    " with on_failure='spool' to keep batches locally until it is back",
                    conversation_id=conversation_id,
                    events=len(events),
                ) from e
            await self._spool_batch(conversation_id, events, e, user_id)

    def append_sync(
        self,
        conn: Connection,
        conversation_id: str,
        events: Sequence[AuditEvent],
        *,
        user_id: str | None = None,
    ) -> list[str]:
        """`append(..., connection=...)` for a sync connection: the batch in the caller's
        transaction, e.g. a turn's last write run by `frontdesk.db.run_write`. Returns the
        refs of the blobs it inserted, for `committed` once the caller's COMMIT is done.

        Args:
            conn: A connection of this log's database (see `joinable`) inside a write
                transaction the caller commits. A failure propagates as it is.
            conversation_id: The conversation the events belong to.
            events: The batch, in order.
            user_id: The conversation's owner (see `append`).

        Raises:
            AuditConfigError: `conn` is not of this log's database, or batches are spooled.
            AuditPayloadError: an event's payload is not JSON.
        """
        if not events:
            return []
        self.check_writable()
        if not self._writes_to(conn) or not self.joinable(self._engine):
            raise AuditConfigError(
                "append_sync needs a connection of the audit log's own engine and an empty"
                " spool; call append without a connection"
            )
        batch = [self._prepare(e, False, user_id) for e in events]
        return self._write_in(conn, conversation_id, batch, False, user_id)

    def _writes_to(self, conn: Connection) -> bool:
        """`writes_to(conn, engine)` for this log's engine, remembered for `conn`'s engine:
        a connection's engine is its engine's for as long as both live."""
        if conn.engine is self._joined:
            return True
        if writes_to(conn, self._engine):
            self._joined = conn.engine
            return True
        return False

    def committed(
        self,
        events: Sequence[AuditEvent],
        blobs_written: Sequence[str] = (),
        conversation_id: str | None = None,
    ) -> None:
        """Say that a batch written with `append_sync` (or `ahead`) was committed: its
        system prompts and the blobs it wrote (`blobs_written`, what `append_sync` returned)
        are stored, and later batches of this log neither insert nor look for them again;
        with `conversation_id`, the head it moved is that conversation's now."""
        self._stored_prompts.update(
            _prompt_digest(e.system_prompt) for e in events if e.system_prompt is not None
        )
        self._stored.committed(blobs_written)
        if conversation_id is not None:
            self._head_committed(conversation_id)

    def _head_committed(self, conversation_id: str) -> None:
        moved = self._moved.pop(conversation_id, None)
        if moved is None:
            return
        if len(self._heads) >= _HEADS_KEPT:  # Bounded: start afresh rather than grow.
            self._heads.clear()
        self._heads[conversation_id] = moved

    def ahead(
        self, conversation_id: str, events: Sequence[AuditEvent], *, user_id: str | None = None
    ) -> Ahead | None:
        """The batch's rows, chained from the head of the conversation's last batch this log
        saw committed, to be written by one call of the server's (`frontdesk_finish_turn`,
        revision 0031), which refuses them if the head moved meanwhile; `None` when they
        cannot be made without reading the database (no such head, a system prompt or a
        blob whose storing is unknown, payloads to encrypt): then `append_sync`.

        Raises:
            AuditKeyError: see `check_writable`.
            AuditPayloadError: an event's payload is not JSON.
        """
        head = self._heads.get(conversation_id)
        if not events or head is None or self._keys is not None or self._stored.pending:
            return None
        if not self.joinable(self._engine):
            return None
        self.check_writable()
        batch = [self._prepare(e, False, user_id) for e in events]
        if any(p.prompt_sha256 not in self._stored_prompts for p in batch if p.prompt_sha256):
            return None
        rows, seq, prev = self._rows(conversation_id, head[0], head[1], batch)
        fresh = self._unstored_blobs(batch)
        if any(kid is not None for kid, _ in fresh.values()):
            return None  # Sealed blobs: `append_sync` seals them.
        blob_rows: list[dict[str, Any]] = [
            {"ref": ref, "kid": None, "body": compact.deflate(text)}
            for ref, (_, text) in fresh.items()
        ]
        written = list(fresh)
        self._stored.pending.update(written)  # Probed by the next batch unless committed.
        self._moved[conversation_id] = (seq, prev)
        return Ahead(
            conversation_id=conversation_id,
            head_seq=head[0],
            head_hash=head[1],
            events=rows,
            blobs=blob_rows,
            written=written,
        )

    async def prepare_key(self, user_id: str | None) -> None:
        """Make (and commit) the user's data key for this month unless it is cached.

        A no-op without a master key or once the key is cached; otherwise one short write
        transaction of its own, so that the turn's joint write (`append_sync`) does no key
        statement. Call it before a batch that will join a transaction.
        """
        if self._keys is None:
            return
        keys, ref, period = (
            self._keys,
            self._refs.ref("data_key", user_id),
            crypto.period_of(_utc_text(datetime.now(UTC))),
        )
        if keys.ready(ref, period):
            return
        memo: dict[tuple[str, str], crypto.Cached] = {}
        try:
            await run_write(self._engine, lambda conn: keys.for_writing(conn, ref, period, memo))
        except (SQLAlchemyError, OSError) as e:  # The batch makes the key itself, then.
            log.warning("audit_key_not_prepared", error=type(e).__name__)
            return
        for entry in memo.values():
            entry.confirmed = True

    async def seal_for_user(
        self, user_id: str | None, content: Mapping[str, Any], associated: bytes
    ) -> dict[str, Any] | None:
        """`content` sealed like an audit payload, under the user's data key for this month
        (an envelope to keep elsewhere: the values a request held for the customer's yes
        keeps, `orchestrator/confirmation.py`); `None` without a master key. Erasing the
        user destroys the key, so the envelope can never be opened again.

        `associated` binds the ciphertext to where it is kept (`open_for_user` must be
        given the same)."""
        if self._keys is None:
            return None
        keys = self._keys
        ref = self._refs.ref("data_key", user_id)
        period = crypto.period_of(_utc_text(datetime.now(UTC)))
        await self.prepare_key(user_id)
        cached = keys.cached(ref, period) if keys.ready(ref, period) else None
        if cached is not None:
            kid, aead = cached, keys.cipher_of(cached)
        else:  # Not prepared (the key table was busy): made in a write of its own.
            memo: dict[tuple[str, str], crypto.Cached] = {}
            kid, aead = await run_write(
                self._engine, lambda conn: keys.for_writing(conn, ref, period, memo)
            )
            for entry in memo.values():
                entry.confirmed = True
        parts = crypto.split({"sealed": dict(content)})
        return crypto.seal(parts, kid=kid, aead=aead, associated=associated, deflate=False)

    async def open_for_user(
        self, envelope: Mapping[str, Any], associated: bytes
    ) -> dict[str, Any] | None:
        """What `seal_for_user` sealed; `None` once the user's key is destroyed (erased).

        Raises:
            AuditKeyError: no master key is configured, or the envelope was moved or edited.
        """
        kid = str(envelope.get("kid"))
        rows = await run_read(self._engine, lambda conn: crypto.load_rows(conn, [kid]))
        opened = PayloadOpener(self._keys, rows).open(envelope, associated)
        if opened.get("erased"):
            return None
        sealed = opened.get("sealed")
        return dict(sealed) if isinstance(sealed, Mapping) else None

    def joinable(self, engine: AsyncEngine) -> bool:
        """Whether a batch may be written in a transaction of `engine` (see `append`).

        Only when the log writes to that very engine, and no spooled batch must go first.
        """
        return engine is self._engine and (self._spool is None or not self._spool.path.exists())

    async def flush_spool(self) -> int:
        """Write the spooled batches now; returns how many were written.

        Raises:
            AuditWriteError: when the database still refuses them (they stay spooled).
        """
        if self._spool is None:
            return 0
        written, error = await self._spool.drain(self._write_idempotent)
        if error is not None:
            raise AuditWriteError(
                f"the audit spool could not be flushed ({type(error).__name__});"
                f" {self._spool.pending()} batches remain in {self._spool.path}",
                conversation_id="",
                events=0,
            ) from error
        return written

    def spooled(self) -> int:
        """How many batches wait in the spool."""
        return 0 if self._spool is None else self._spool.pending()

    async def _spool_batch(
        self,
        conversation_id: str,
        events: Sequence[AuditEvent],
        error: BaseException,
        user_id: str | None,
    ) -> None:
        assert self._spool is not None
        await self._spool.add(conversation_id, events, user_id)
        log.warning(
            "audit_write_spooled",
            conversation_id=conversation_id,
            events=len(events),
            error=type(error).__name__,
            spool=str(self._spool.path),
        )

    def _prepare(
        self, event: AuditEvent, in_clear: bool = False, user_id: str | None = None
    ) -> _Prepared:
        """JSON, prompt hash and packing done before the transaction (packing needs the
        data key's address key: when the owner's key is not cached it waits for `_sealed`)."""
        prompt = None if event.system_prompt is None else _prompt_digest(event.system_prompt)
        created, created_stored = _stamp(event.created_at)
        if self._keys is not None and not in_clear:
            ref, period = self._refs.ref("data_key", user_id), crypto.period_of(created)
            kid = self._keys.cached(ref, period)
            if kid is None:
                split = crypto.split(event.payload)
                return _Prepared(
                    event=event,
                    created_at=created,
                    payload_json="",
                    prompt_sha256=prompt,
                    split=split,
                    created_stored=created_stored,
                )
            return self._packed_split(event, created, prompt, kid, created_stored)
        packer = blobs.Packer(self._addresses(None))
        # Packing made each part's text: the payload's JSON is joined from them.
        _, payload_json = packer.payload(event.payload, crypto.CLEAR_FIELDS)
        return _Prepared(
            event=event,
            created_at=created,
            payload_json=payload_json,
            prompt_sha256=prompt,
            blobs=packer.made,
            stored=compact.deflate(payload_json),
            created_stored=created_stored,
        )

    def _packed_split(
        self,
        event: AuditEvent,
        created: str,
        prompt: str | None,
        kid: str,
        created_stored: bytes = b"",
    ) -> _Prepared:
        assert self._keys is not None
        packer = blobs.Packer(self._addresses(kid))
        parts = crypto.split(event.payload, packer.pack)
        return _Prepared(
            event=event,
            created_at=created,
            payload_json="",
            prompt_sha256=prompt,
            split=parts,
            kid=kid,
            blobs=packer.made,
            created_stored=created_stored,
        )

    def _addresses(self, kid: str | None) -> blobs.Addresses:
        """The cached addresses of one data key (`None`: the log's clear blobs)."""
        found = self._address_cache.get(kid)
        if found is None:
            if len(self._address_cache) >= 256:
                self._address_cache.clear()
            key = None if kid is None or self._keys is None else self._keys.mac_of(kid)
            found = self._address_cache[kid] = blobs.Addresses(key)
        return found

    async def _write_idempotent(
        self, conversation_id: str, events: Sequence[AuditEvent], user_id: str | None
    ) -> None:
        batch = [self._prepare(e, False, user_id) for e in events]
        await self._write(conversation_id, batch, idempotent=True, user_id=user_id)

    async def _write(
        self,
        conversation_id: str,
        batch: Sequence[_Prepared],
        *,
        idempotent: bool,
        user_id: str | None,
    ) -> None:
        """Write a batch, retrying transient database errors a few times."""

        memo: dict[tuple[str, str], crypto.Cached] = {}
        written: list[str] = []

        def work(conn: Connection) -> None:
            memo.clear()
            written[:] = self._write_in(conn, conversation_id, batch, idempotent, user_id, memo)

        async for attempt in AsyncRetrying(
            retry=retry_if_exception(_retryable),
            stop=stop_after_attempt(3),
            wait=wait_random_exponential(multiplier=0.05, max=1.0),
            reraise=True,
        ):
            with attempt:
                # The first statement writes the head row, so on SQLite the write lock is
                # taken before anything is read (and frontdesk.db's engines begin with
                # BEGIN IMMEDIATE anyway); on PostgreSQL the head row is locked FOR UPDATE.
                await run_write(self._engine, work)
        self._stored_prompts.update(p.prompt_sha256 for p in batch if p.prompt_sha256)
        self._stored.committed(written)
        self._head_committed(conversation_id)
        for entry in memo.values():  # Committed with the batch: no re-insert from now on.
            entry.confirmed = True

    def _write_in(
        self,
        conn: Connection,
        conversation_id: str,
        batch: Sequence[_Prepared],
        idempotent: bool,
        user_id: str | None = None,
        memo: dict[tuple[str, str], crypto.Cached] | None = None,
    ) -> list[str]:
        """The body of the append transaction: lock the head, chain the rows, move the head.
        Returns the refs of the blobs it inserted."""
        # On SQLite, a head this log saw committed is tried first: one conditional UPDATE
        # moves it, read and moved at once (the transaction holds the write lock).
        known = (
            None
            if idempotent or conn.dialect.name != "sqlite"
            else self._heads.get(conversation_id)
        )
        if known is not None:
            seq, prev = known
        else:
            seq, prev = self._read_head(conn, conversation_id)
        if idempotent:
            batch = self._unwritten(conn, conversation_id, batch)
            if not batch:
                return []
        prompts = [
            {"sha256": p.prompt_sha256, "text_json": _prompt_json(p.event.system_prompt or "")}
            for p in {p.prompt_sha256: p for p in batch if p.prompt_sha256}.values()
            if p.prompt_sha256 not in self._stored_prompts
        ]
        if self._keys is not None and any(p.split is not None for p in batch):
            batch = self._sealed(
                conn, conversation_id, batch, user_id, {} if memo is None else memo
            )
        rows, moved = self._chained(conversation_id, seq, prev, batch)
        if known is not None:
            was = {"was_seq": known[0], "was_hash": hash_bytes(known[1])}
            if _MOVE_KNOWN_HEAD.run(conn, {**moved, **was}) != 1:  # Another writer's batch.
                known = None
                rows, moved = self._chained(
                    conversation_id, *self._read_head(conn, conversation_id), batch
                )
        if prompts:
            _PROMPT.run_many(conn, prompts)
        made = self._unstored_blobs(batch)
        written: list[str] = []
        if made:
            keys = self._keys
            written = blobs.write(
                conn,
                made,
                self._stored,
                lambda kid: None if kid is None or keys is None else keys.cipher_of(kid),
            )
        _INSERT_EVENT.run_many(conn, rows)
        if known is None and conn.dialect.name != "postgresql":  # There the link trigger has.
            _MOVE_HEAD.run(conn, moved)
        return written

    @staticmethod
    def _read_head(conn: Connection, conversation_id: str) -> tuple[int, str]:
        """The conversation's head (seq, hash), created if missing; row-locked on PostgreSQL
        (an upsert that "updates" the row locks it like SELECT ... FOR UPDATE)."""
        head = _HEAD.first(conn, {"conversation_id": conversation_id})
        assert head is not None, "the upsert returns the head row"
        return head["seq"], hash_hex(head["hash"])

    def _chained(
        self, conversation_id: str, seq: int, prev: str, batch: Sequence[_Prepared]
    ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The batch's rows chained after the head (`seq`, `prev`), and the head's move."""
        rows, seq, prev = self._rows(conversation_id, seq, prev, batch)
        self._moved[conversation_id] = (seq, prev)
        return rows, {"conversation": conversation_id, "seq": seq, "hash": hash_bytes(prev)}

    def _unstored_blobs(self, batch: Sequence[_Prepared]) -> dict[str, tuple[str | None, str]]:
        """The blobs a batch refers to that are not known to be stored: ref -> (kid, text).
        (A ref known now is committed; `blobs.write` looks again after its probe.)"""
        known = self._stored.known
        return {
            ref: (item.kid, text)
            for item in batch
            for ref, text in item.blobs.items()
            if ref not in known
        }

    def _sealed(
        self,
        conn: Connection,
        conversation_id: str,
        batch: Sequence[_Prepared],
        user_id: str | None,
        memo: dict[tuple[str, str], crypto.Cached],
    ) -> list[_Prepared]:
        """The batch with each payload encrypted under its owner's key for its month."""
        assert self._keys is not None
        ref = self._refs.ref("data_key", user_id)
        out = []
        for item in batch:
            if item.split is None:
                out.append(item)
                continue
            e = item.event
            kid, aead = self._keys.for_writing(conn, ref, crypto.period_of(item.created_at), memo)
            if item.kid != kid:  # Packed for another key, or not yet: pack for this one.
                item = self._packed_split(
                    e, item.created_at, item.prompt_sha256, kid, item.created_stored
                )
            assert item.split is not None
            associated = crypto.aad(conversation_id, e.event_id, e.kind)
            envelope = crypto.seal(item.split, kid=kid, aead=aead, associated=associated)
            sealed = canonical_json(envelope)
            out.append(
                _Prepared(
                    event=e,
                    created_at=item.created_at,
                    payload_json=sealed,
                    prompt_sha256=item.prompt_sha256,
                    kid=kid,
                    blobs=item.blobs,
                    stored=compact.deflate(sealed),
                    created_stored=item.created_stored,
                )
            )
        return out

    @staticmethod
    def _rows(
        conversation_id: str, seq: int, prev: str, batch: Sequence[_Prepared]
    ) -> tuple[list[dict[str, Any]], int, str]:
        """The batch's rows chained after the head (`seq`, `prev`), and the head they make.
        A turn's events share their turn id: its stored form is made once."""
        rows = []
        turn_id: str | None = None
        turn_stored = b""
        for item in batch:
            seq += 1
            if item.event.turn_id != turn_id:
                turn_id = item.event.turn_id
                turn_stored = id_bytes(turn_id)
            row, prev = AuditLog._row(conversation_id, seq, prev, item, turn_stored)
            rows.append(row)
        return rows, seq, prev

    @staticmethod
    def _row(
        conversation_id: str, seq: int, prev: str, item: _Prepared, turn_stored: bytes
    ) -> tuple[dict[str, Any], str]:
        """The row to insert (its `prev_hash` is not stored: see `events`) and its hash;
        `turn_stored` is `id_bytes` of the event's turn id."""
        event = item.event
        digest = spliced_row_hash(
            conversation_id=conversation_id,
            seq=seq,
            event_id=event.event_id,
            kind=event.kind,
            turn_id=event.turn_id,
            created_at=item.created_at,
            payload_json=item.payload_json,
            prompt_sha256=item.prompt_sha256,
            prev_hash=prev,
        )
        return {
            "conversation_id": conversation_id,
            "seq": seq,
            "event_id": id_bytes(event.event_id),
            "kind": event.kind,
            "turn_id": turn_stored,
            "created_at": item.created_stored or time_bytes(item.created_at),
            "payload_json": item.stored or compact.deflate(item.payload_json),
            "prompt_sha256": (
                None if item.prompt_sha256 is None else id_bytes(item.prompt_sha256, PROMPT_DIGEST)
            ),
            "hash": hash_bytes(digest),
        }, digest

    @staticmethod
    def _unwritten(
        conn: Connection, conversation_id: str, batch: Sequence[_Prepared]
    ) -> list[_Prepared]:
        """The events of a re-sent batch that are not stored yet.

        Looked for among the conversation's own rows (its `(conversation_id, seq)` key),
        under the head lock: no index on `event_id` is kept for this rare path (a spooled
        batch), which would cost every row an index entry.
        """
        ids = [id_bytes(p.event.event_id) for p in batch]
        found = conn.execute(
            select(audit_event.c.event_id).where(
                audit_event.c.conversation_id == conversation_id,
                audit_event.c.event_id.in_(ids),
            )
        )
        stored = {id_text(i) for i in found.scalars()}
        return [p for p in batch if p.event.event_id not in stored]

    # Reading.

    @contextlib.asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        """A read-only connection (a snapshot on SQLite, never queued behind writers)."""
        async with self._engine.connect() as conn:
            await conn.execution_options(frontdesk_readonly=True)
            yield conn

    async def conversations(self) -> list[str]:
        """Every conversation with audit rows (or a head), sorted."""
        query = union(
            select(audit_event.c.conversation_id).distinct(),
            select(audit_head.c.conversation_id),
        )
        async with self._read() as conn:
            return sorted((await conn.execute(query)).scalars())

    async def events(self, conversation_id: str, *, decrypt: bool = True) -> list[StoredAuditEvent]:
        """A conversation's rows in chain order, with their system prompt texts.

        Encrypted payloads are decrypted as they are read (`payload`); with
        `decrypt=False` their content fields read as `[encrypted]` and no key is needed.
        """
        async with self._read() as conn:
            return await self._events(conn, conversation_id, decrypt=decrypt)

    async def _events(
        self, conn: AsyncConnection, conversation_id: str, *, decrypt: bool = True
    ) -> list[StoredAuditEvent]:
        """`events`, read on `conn` (in its transaction, so beside the head of the same read)."""
        query = (
            select(audit_event)
            .where(audit_event.c.conversation_id == conversation_id)
            .order_by(audit_event.c.seq)
        )
        result = list(await conn.execute(query))
        # Digests are stored as bytes, prompts keyed by hex: joined here, not in SQL.
        digests = [id_text(r.prompt_sha256, PROMPT_DIGEST) for r in result]
        wanted = sorted({d for d in digests if d is not None})
        prompts: dict[str, str] = {}
        if wanted:
            found = await conn.execute(
                select(audit_prompt.c.sha256, audit_prompt.c.text_json).where(
                    audit_prompt.c.sha256.in_(wanted)
                )
            )
            prompts = {sha: json.loads(text_json) for sha, text_json in found}
        texts = [_stored_text(r.payload_json) for r in result]
        kids = [str(json.loads(t).get("kid")) for t in texts if crypto.is_envelope_text(t)]
        opener = None
        if kids:
            key_rows = await conn.run_sync(crypto.load_rows, kids)
            opener = PayloadOpener(self._keys, key_rows, decrypt=decrypt)
        hashes = [hash_hex(r.hash) for r in result]
        # A row's link is not stored: it is the hash of the row before it in this order.
        links = [GENESIS_HASH, *hashes][: len(hashes)]
        stored = [
            StoredAuditEvent(
                conversation_id=r.conversation_id,
                seq=r.seq,
                event_id=str(id_text(r.event_id)),
                kind=r.kind,
                turn_id=str(id_text(r.turn_id)),
                created_at=time_text(r.created_at),
                payload_json=text,
                prompt_sha256=sha,
                prev_hash=prev,
                hash=digest,
                system_prompt=None if sha is None else prompts.get(sha),
                opener=opener,
            )
            for r, text, prev, digest, sha in zip(
                result, texts, links, hashes, digests, strict=True
            )
        ]
        await conn.run_sync(_expand_all, stored, opener)
        return stored

    async def attempt_usage(
        self, conversation_ids: Sequence[str], experts: frozenset[str]
    ) -> dict[str, list[tuple[str, str, dict[str, int]]]]:
        """Per conversation, the (expert, model, usage) of every model attempt the audit
        recorded for one of `experts` (the summariser's and the memory expert's calls,
        which no turn outcome holds), read from the payloads' clear fields: no master
        key is needed, and a shredded payload still counts. One read of the
        conversations' `model_attempt` rows (their chain index); a caller pages the ids."""
        if not conversation_ids:
            return {}
        query = select(audit_event.c.conversation_id, audit_event.c.payload_json).where(
            audit_event.c.conversation_id.in_(list(conversation_ids)),
            audit_event.c.kind == "model_attempt",
        )
        found: dict[str, list[tuple[str, str, dict[str, int]]]] = {}
        async with self._read() as conn:
            rows = await conn.execute(query)
            for conversation_id, stored in rows:
                if not _names_one_of(stored, experts):  # Most are a turn's: left unread.
                    continue
                try:
                    payload = json.loads(_stored_text(stored))
                except ValueError:  # An edited row: `audit verify` reports it.
                    continue
                if crypto.is_envelope(payload):
                    payload = payload.get("clear") or {}
                expert = str(payload.get("expert", ""))
                usage = payload.get("usage")
                if expert not in experts or not isinstance(usage, dict):
                    continue
                counts = {k: int(v) for k, v in usage.items() if isinstance(v, int | float)}
                found.setdefault(conversation_id, []).append(
                    (expert, str(payload.get("model", "")), counts)
                )
        return found

    async def heads(self) -> dict[str, Head]:
        """Each conversation's head (last seq and hash): keep a copy elsewhere as an anchor."""
        async with self._read() as conn:
            result = await conn.execute(select(audit_head))
            return {r.conversation_id: Head(r.seq, hash_hex(r.hash)) for r in result if r.seq > 0}

    async def verify(
        self,
        conversation_id: str | None = None,
        *,
        anchors: Mapping[str, Head] | None = None,
        answered: Mapping[str, int] | None = None,
    ) -> VerifyReport:
        """Check the chain of one conversation (or all of them, with `None`).

        Args:
            conversation_id: The conversation to check; `None` checks every one.
            anchors: Heads saved earlier outside the database (see `heads`); catches a
                tail truncated by someone who also rewrote the head table.
            answered: Answered turns (assistant messages) per conversation, from the
                conversation store; a conversation with more answers than audited
                replies fails (`unaudited`), even one with no audit rows at all. The
                audit package cannot read the store itself, so the caller counts.
        """
        ids = [conversation_id] if conversation_id is not None else await self.conversations()
        if conversation_id is None:
            extra = set(anchors or ()) | {c for c, n in (answered or {}).items() if n > 0}
            ids = sorted(set(ids) | extra)
        verdicts = []
        for cid in ids:
            head, rows = await self._head_and_rows(cid)
            prompts = {
                r.prompt_sha256: r.system_prompt or ""
                for r in rows
                if r.prompt_sha256 and r.system_prompt is not None
            }
            anchor = (anchors or {}).get(cid)
            verdict = verify_chain(cid, rows, head=head, prompts=prompts, anchor=anchor)
            verdict = _check_blobs(verdict, rows)
            if answered is not None:
                verdict = check_answers(verdict, rows, answered.get(cid, 0))
            verdicts.append(verdict)
        return VerifyReport(verdicts)

    async def _head_and_rows(
        self, conversation_id: str
    ) -> tuple[Head | None, list[StoredAuditEvent]]:
        """A conversation's head and rows as of one moment.

        Read in two statements of two snapshots, a live conversation (a background job
        appending) would fail: rows committed between them read as a truncated tail (head
        after the rows) or as rows inserted beyond the head (head before them). SQLite's
        read transaction is one snapshot; PostgreSQL's needs `REPEATABLE READ` for that
        (its default, `READ COMMITTED`, takes one per statement).
        """
        async with self._read() as conn:
            if conn.dialect.name != "sqlite":
                await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                found = (
                    await conn.execute(
                        select(audit_head.c.seq, audit_head.c.hash).where(
                            audit_head.c.conversation_id == conversation_id
                        )
                    )
                ).first()
                head = None if found is None else Head(found.seq, hash_hex(found.hash))
                return head, await self._events(conn, conversation_id)
