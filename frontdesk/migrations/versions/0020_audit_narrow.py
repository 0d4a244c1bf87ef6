"""Narrower audit rows: hashes, ids and times as bytes, no stored link, one key a row.

- `audit_event.hash` and `audit_head.hash` hold the hash's 32 bytes, not its 64 hex
  characters (`bytea` on PostgreSQL); `event_id` and `turn_id` (uuid hex) and
  `prompt_sha256` are stored the same way when they are lowercase hex of their size, any
  other text as its UTF-8 (`audit.store.id_bytes`, which reads back exactly);
  `created_at`, when it is the canonical UTC text, as 8 bytes of microseconds
  (`audit.store.time_bytes`; converted in Python on both backends, with the codec the
  application reads with).
- `audit_event.prev_hash` is dropped: it is always the hash of the row before in
  `(conversation_id, seq)` order (the genesis hash for the first), so the reader takes it
  from there. The row hash still covers it, computed exactly as before: every chain, head
  and external anchor stays valid, and no key is needed.
- The surrogate `id` is dropped and `(conversation_id, seq)`, the row's place in its chain
  and already unique, becomes the primary key: one index a row instead of two on
  PostgreSQL (on SQLite the rowid stays, hidden, and keeps the old id's value).
- The unique index on `event_id` is dropped: it kept a re-sent (spooled) batch from being
  stored twice, which the writer now checks among the conversation's own rows under the
  head lock, so no row pays an index entry for it.
- PostgreSQL: `audit_event_link` no longer compares a stored `prev_hash` with the head's
  hash (a row no longer says what it continues from: it continues the head by definition);
  it still refuses a row whose seq is not the head's + 1, and moves the head.
  `audit_lock_head` keeps its signature (the hash returned as hex), so the grants made by
  `frontdesk db roles` stay.

SQLite cannot drop a unique constraint in place: the table is copied into its new form
(and its append-only triggers made again). On PostgreSQL the timestamps are rewritten row
by row after the table's rewrite; `VACUUM FULL` gives the dead rows' space back (later rows
reuse it anyway). The downgrade puts the text columns, `prev_hash` (from the previous row,
as the reader does), the id and the unique index back; it fails if two rows came to share
an event id in between.

Revision ID: 0020_audit_narrow
Revises: 0017_audit_compact
Create Date: 2026-12-02
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from alembic import op

revision: str = "0020_audit_narrow"
down_revision: str | Sequence[str] | None = "0017_audit_compact"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# -- the stored forms of this revision, copied from `audit/store.py` as it was written ----
# (a migration never imports live code: the audit code may change, this revision may not)

PROMPT_DIGEST = 32
"""`prompt_sha256` is stored by `id_bytes` as a sha256 (32 bytes); event and turn ids as
uuid hex (16)."""
_HEX = re.compile("[0-9a-f]+")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def id_bytes(value: str, size: int = 16) -> bytes:
    """An id in its stored form: lowercase hex of `size` bytes (a uuid hex, a sha256) as
    those bytes, any other text as its UTF-8 (a byte 0xff added when that is `size` bytes
    too, so the two forms never meet: UTF-8 holds no 0xff)."""
    if len(value) == 2 * size and _HEX.fullmatch(value):
        return bytes.fromhex(value)
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


def _utc_text(moment: datetime) -> str:
    """The canonical timestamp text (naive datetimes are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    elif moment.tzinfo is not UTC:
        moment = moment.astimezone(UTC)
    return moment.isoformat(timespec="microseconds")


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
    return moment.isoformat(timespec="microseconds")


_GENESIS = "0" * 64
_SQLITE_TRIGGERS = (
    "CREATE TRIGGER audit_event_no_update BEFORE UPDATE ON audit_event "
    "BEGIN SELECT RAISE(ABORT, 'audit_event is append-only'); END",
    "CREATE TRIGGER audit_event_no_delete BEFORE DELETE ON audit_event "
    "BEGIN SELECT RAISE(ABORT, 'audit_event is append-only'); END",
)
_SEQ_KEY = "CONSTRAINT uq_audit_event_conversation_seq UNIQUE (conversation_id, seq)"
_NARROW_SQLITE = (
    "CREATE TABLE audit_event_new (conversation_id VARCHAR(255) NOT NULL,"
    " seq INTEGER NOT NULL, event_id BLOB NOT NULL, kind VARCHAR(40) NOT NULL,"
    " turn_id BLOB NOT NULL, created_at BLOB NOT NULL, payload_json BLOB NOT NULL,"
    " prompt_sha256 BLOB, hash BLOB NOT NULL,"
    " CONSTRAINT audit_event_pkey PRIMARY KEY (conversation_id, seq))"
)
_WIDE_SQLITE = (
    "CREATE TABLE audit_event_new (id INTEGER NOT NULL, conversation_id VARCHAR(255) NOT NULL,"
    " seq INTEGER NOT NULL, event_id VARCHAR(64) NOT NULL, kind VARCHAR(40) NOT NULL,"
    " turn_id VARCHAR(255) NOT NULL, created_at VARCHAR(40) NOT NULL,"
    " payload_json BLOB NOT NULL, prompt_sha256 VARCHAR(64),"
    " prev_hash VARCHAR(64) NOT NULL, hash VARCHAR(64) NOT NULL, PRIMARY KEY (id),"
    f" {_SEQ_KEY}, CONSTRAINT uq_audit_event_event_id UNIQUE (event_id))"
)
_IDS = (("event_id", 16), ("turn_id", 16), ("prompt_sha256", PROMPT_DIGEST))
"""The columns stored by `id_bytes`, with the size of their hex form's bytes."""
_COLUMNS = "conversation_id, seq, event_id, kind, turn_id, created_at, payload_json, prompt_sha256"
_BATCH = 2000


def _path(schema: str) -> str:
    # SECURITY DEFINER functions run as their owner: their search_path is pinned (see 0007).
    return f'SET search_path = "{schema}", pg_temp'


def _lock_head(schema: str, stored: str, genesis: str) -> str:
    return (
        "CREATE OR REPLACE FUNCTION audit_lock_head(conversation varchar)"
        " RETURNS TABLE(head_seq integer, head_hash varchar)"
        f" LANGUAGE plpgsql SECURITY DEFINER {_path(schema)} AS $$ BEGIN"
        " INSERT INTO audit_head (conversation_id, seq, hash)"
        f" VALUES (conversation, 0, {genesis}) ON CONFLICT (conversation_id) DO NOTHING;"
        f" RETURN QUERY SELECT h.seq, {stored}::varchar FROM audit_head h"
        " WHERE h.conversation_id = conversation FOR UPDATE;"
        " END; $$"
    )


def _link(schema: str, *, narrow: bool) -> str:
    declared = "bytea" if narrow else "varchar"
    genesis = f"'\\x{_GENESIS}'::bytea" if narrow else f"'{_GENESIS}'"
    continues = "" if narrow else " OR NEW.prev_hash <> last_hash"
    return (
        "CREATE OR REPLACE FUNCTION audit_event_link() RETURNS trigger"
        f" LANGUAGE plpgsql SECURITY DEFINER {_path(schema)} AS $$"
        f" DECLARE last_seq integer; last_hash {declared};"
        " BEGIN"
        " SELECT h.seq, h.hash INTO last_seq, last_hash FROM audit_head h"
        " WHERE h.conversation_id = NEW.conversation_id FOR UPDATE;"
        " IF NOT FOUND THEN"
        f" last_seq := 0; last_hash := {genesis};"
        " INSERT INTO audit_head (conversation_id, seq, hash)"
        " VALUES (NEW.conversation_id, 0, last_hash);"
        " END IF;"
        f" IF NEW.seq <> last_seq + 1{continues} THEN"
        " RAISE EXCEPTION 'audit_event seq % of conversation % does not continue its chain"
        " (head at seq %)', NEW.seq, NEW.conversation_id, last_seq"
        " USING ERRCODE = 'integrity_constraint_violation';"
        " END IF;"
        " UPDATE audit_head SET seq = NEW.seq, hash = NEW.hash"
        " WHERE conversation_id = NEW.conversation_id;"
        " RETURN NEW;"
        " END; $$"
    )


def _hex_to_bytes(value: object) -> object:
    """A stored hex hash as its bytes (anything else, e.g. edited by hand, as it is)."""
    if isinstance(value, str):
        try:
            return bytes.fromhex(value)
        except ValueError:
            return value
    return value


def _narrow_row(row: dict[str, object]) -> dict[str, object]:
    out = {**row, "hash": _hex_to_bytes(row["hash"])}
    if isinstance(row["created_at"], str):
        out["created_at"] = time_bytes(row["created_at"])
    for column, size in _IDS:
        value = row[column]
        out[column] = id_bytes(value, size) if isinstance(value, str) else value
    return out


def _pg_bytes(column: str, size: int) -> str:
    """`id_bytes` in SQL (PostgreSQL text holds no lone surrogate, so UTF-8 is exact)."""
    text = f"convert_to({column}, 'UTF8')"
    return (
        f"CASE WHEN {column} ~ '^[0-9a-f]{{{2 * size}}}$' THEN decode({column}, 'hex')"
        f" WHEN octet_length({text}) = {size} THEN {text} || '\\xff'::bytea ELSE {text} END"
    )


def _pg_text(column: str, size: int) -> str:
    """`id_text` in SQL."""
    return (
        f"CASE WHEN octet_length({column}) = {size} THEN encode({column}, 'hex')"
        f" WHEN octet_length({column}) = {size + 1} AND get_byte({column}, {size}) = 255"
        f" THEN convert_from(substring({column} from 1 for {size}), 'UTF8')"
        f" ELSE convert_from({column}, 'UTF8') END"
    )


def _sqlite_text(column: str, size: int) -> str:
    """`id_text` in SQL (text stored by hand is kept as it is)."""
    return (
        f"CASE WHEN typeof({column}) <> 'blob' THEN {column}"
        f" WHEN length({column}) = {size} THEN lower(hex({column}))"
        f" WHEN length({column}) = {size + 1} AND substr({column}, {size + 1}, 1) = x'ff'"
        f" THEN CAST(substr({column}, 1, {size}) AS TEXT) ELSE CAST({column} AS TEXT) END"
    )


def _copy_sqlite_narrow(bind: sa.Connection) -> None:
    """Copy the rows into the narrow table, hashes as bytes (SQLite 3.40 has no unhex); the
    old id becomes the (hidden) rowid, so the rows keep their order on disk."""
    names = ["rowid", *_COLUMNS.split(", "), "hash"]
    insert = sa.text(
        f"INSERT INTO audit_event_new ({', '.join(names)})"
        f" VALUES ({', '.join(':' + n for n in names)})"
    )
    after = -1
    while True:
        rows = bind.execute(
            sa.text(
                f"SELECT id AS rowid, {_COLUMNS}, hash FROM audit_event"
                " WHERE id > :after ORDER BY id LIMIT :n"
            ),
            {"after": after, "n": _BATCH},
        ).all()
        if not rows:
            return
        bind.execute(insert, [_narrow_row(r._asdict()) for r in rows])
        after = rows[-1].rowid


def _convert_times(
    bind: sa.Connection, table: str, key: str, convert: Callable[[bytes | str], object]
) -> None:
    """Rewrite every `created_at` of `table` with `convert`, in batches in `key` order."""
    last: dict[str, object] | None = None
    names = key.split(", ")
    while True:
        after = "" if last is None else f"WHERE ({key}) > ({', '.join(':' + n for n in names)})"
        rows = bind.execute(
            sa.text(f"SELECT {key}, created_at FROM {table} {after} ORDER BY {key} LIMIT :n"),
            {**(last or {}), "n": _BATCH},
        ).all()
        if not rows:
            return
        match = " AND ".join(f"{n} = :{n}" for n in names)
        bind.execute(
            sa.text(f"UPDATE {table} SET created_at = :t WHERE {match}"),
            [{**r._asdict(), "t": convert(r.created_at)} for r in rows],
        )
        last = {n: getattr(rows[-1], n) for n in names}


def _stored_time(text_bytes: bytes | str) -> bytes:
    text = text_bytes if isinstance(text_bytes, str) else bytes(text_bytes).decode("utf-8")
    return time_bytes(text)


def _text_time(stored: bytes | str) -> bytes:
    return time_text(stored).encode("utf-8")


def _swap_sqlite() -> None:
    op.execute("DROP TABLE audit_event")  # Its triggers go with it.
    op.execute("ALTER TABLE audit_event_new RENAME TO audit_event")
    for sql in _SQLITE_TRIGGERS:
        op.execute(sql)


def upgrade() -> None:
    """Hashes to bytes, `prev_hash` and the `event_id` index dropped, the link trigger anew."""
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        schema = bind.execute(sa.text("SELECT current_schema()")).scalar_one()
        # The surrogate id goes (and its key and sequence with it): the chain's own place,
        # (conversation_id, seq), is the primary key, so a row has one index entry, not two.
        op.execute(
            "ALTER TABLE audit_event DROP CONSTRAINT uq_audit_event_event_id,"
            " DROP CONSTRAINT uq_audit_event_conversation_seq, DROP COLUMN prev_hash,"
            " DROP COLUMN id"
        )
        # The type changes rewrite the table (once), so the dropped column's bytes go too.
        hashes = "ALTER COLUMN hash TYPE bytea USING decode(hash, 'hex')"
        ids = [f"ALTER COLUMN {c} TYPE bytea USING {_pg_bytes(c, n)}" for c, n in _IDS]
        times = "ALTER COLUMN created_at TYPE bytea USING convert_to(created_at, 'UTF8')"
        op.execute(f"ALTER TABLE audit_event {', '.join([hashes, *ids, times])}")
        op.execute(f"ALTER TABLE audit_head {hashes}")
        op.execute(
            "ALTER TABLE audit_event ADD CONSTRAINT audit_event_pkey"
            " PRIMARY KEY (conversation_id, seq)"
        )
        op.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_append_only")
        _convert_times(bind, "audit_event", "conversation_id, seq", _stored_time)
        op.execute("ALTER TABLE audit_event ENABLE TRIGGER audit_event_append_only")
        op.execute(_lock_head(schema, "encode(h.hash, 'hex')", f"'\\x{_GENESIS}'::bytea"))
        op.execute(_link(schema, narrow=True))
        return
    op.execute(_NARROW_SQLITE)
    _copy_sqlite_narrow(bind)
    _swap_sqlite()
    heads = bind.execute(sa.text("SELECT conversation_id, hash FROM audit_head")).all()
    if heads:
        bind.execute(
            sa.text("UPDATE audit_head SET hash = :h WHERE conversation_id = :c"),
            [{"c": c, "h": _hex_to_bytes(h)} for c, h in heads],
        )


def downgrade() -> None:
    """Hex hashes, `prev_hash` (each row's previous row's hash) and the index back."""
    bind = op.get_bind()
    link = "lag(hash) OVER (PARTITION BY conversation_id ORDER BY seq)"
    if bind.dialect.name == "postgresql":
        schema = bind.execute(sa.text("SELECT current_schema()")).scalar_one()
        op.execute("ALTER TABLE audit_event ADD COLUMN prev_hash varchar(64)")
        op.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_append_only")
        op.execute(
            "UPDATE audit_event e SET prev_hash = l.prev FROM (SELECT conversation_id, seq,"
            f" coalesce(encode({link}, 'hex'), '{_GENESIS}') AS prev FROM audit_event) l"
            " WHERE e.conversation_id = l.conversation_id AND e.seq = l.seq"
        )
        _convert_times(bind, "audit_event", "conversation_id, seq", _text_time)
        op.execute("ALTER TABLE audit_event ENABLE TRIGGER audit_event_append_only")
        op.execute("ALTER TABLE audit_event ALTER COLUMN prev_hash SET NOT NULL")
        hashes = "ALTER COLUMN hash TYPE varchar(64) USING encode(hash, 'hex')"
        ids = [
            f"ALTER COLUMN {c} TYPE varchar({255 if c == 'turn_id' else 64}) USING {_pg_text(c, n)}"
            for c, n in _IDS
        ]
        times = "ALTER COLUMN created_at TYPE varchar(40) USING convert_from(created_at, 'UTF8')"
        op.execute(f"ALTER TABLE audit_event {', '.join([hashes, *ids, times])}")
        op.execute(f"ALTER TABLE audit_head {hashes}")
        op.execute(
            "ALTER TABLE audit_event DROP CONSTRAINT audit_event_pkey,"
            " ADD CONSTRAINT uq_audit_event_conversation_seq UNIQUE (conversation_id, seq),"
            " ADD CONSTRAINT uq_audit_event_event_id UNIQUE (event_id)"
        )
        op.execute("ALTER TABLE audit_event ADD COLUMN id bigserial PRIMARY KEY")
        op.execute(_lock_head(schema, "h.hash", f"'{_GENESIS}'"))
        op.execute(_link(schema, narrow=False))
        return
    # Hand-stored text (not bytes) is kept as it is, as the upgrade kept it.
    as_hex = "CASE typeof({0}) WHEN 'blob' THEN lower(hex({0})) ELSE {0} END"
    op.execute(_WIDE_SQLITE)
    sizes = dict(_IDS)
    columns = ", ".join(
        f"{_sqlite_text(c, sizes[c])} AS {c}" if c in sizes else c for c in _COLUMNS.split(", ")
    )
    op.execute(
        f"INSERT INTO audit_event_new (id, {_COLUMNS}, prev_hash, hash) SELECT rowid, {columns},"
        f" coalesce({as_hex.format(link)}, '{_GENESIS}'), {as_hex.format('hash')}"
        " FROM audit_event"
    )
    _convert_times(bind, "audit_event_new", "id", time_text)
    _swap_sqlite()
    op.execute(f"UPDATE audit_head SET hash = {as_hex.format('hash')}")
