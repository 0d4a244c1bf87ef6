"""Converting a stored log to blob references and back (migration `0014_audit_blobs`), and
to the compact stored form and back (`0017_audit_compact`): frozen copy of `audit/repack.py`.

A log written before `audit.blobs` repeats every message in every row. `repack_log` packs
each row's content fields as `AuditLog.append` now does and links the chain again from the
first row that changed (the row hashes cover the packed form), one conversation at a time.
`unpack_log` does the reverse for a downgrade. A conversation whose chain does not verify
first is left exactly as it is (repacking must never make a tampered log verify), and so
are encrypted rows whose key is not at hand (no master key set, or the key destroyed):
they stay readable and verifiable as they are. The heads move, so anchors kept outside
the database (`AuditLog.heads`) must be taken again after the migration.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy import Connection, select, update

from frontdesk.errors import AuditKeyError
from frontdesk.migrations._frozen_audit import blobs, compact, crypto
from frontdesk.migrations._frozen_audit.chain import (
    GENESIS_HASH,
    Head,
    canonical_json,
    spliced_row_hash,
    verify_chain,
)
from frontdesk.migrations._frozen_audit.crypto import DataKeys, KeyProvider, PayloadOpener

_hex_columns = sa.MetaData()
audit_event = sa.Table(
    "audit_event",
    _hex_columns,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
    sa.Column("conversation_id", sa.String(255)),
    sa.Column("seq", sa.Integer),
    sa.Column("event_id", sa.String(64)),
    sa.Column("kind", sa.String(40)),
    sa.Column("turn_id", sa.String(255)),
    sa.Column("created_at", sa.String(40)),
    sa.Column("payload_json", sa.LargeBinary),
    sa.Column("prompt_sha256", sa.String(64)),
    sa.Column("prev_hash", sa.String(64)),
    sa.Column("hash", sa.String(64)),
)
"""`audit_event` as the migrations before `0020_audit_narrow` (which run this module) find
it: hex hashes and a stored `prev_hash`."""
audit_head = sa.Table(
    "audit_head",
    _hex_columns,
    sa.Column("conversation_id", sa.String(255), primary_key=True),
    sa.Column("seq", sa.Integer),
    sa.Column("hash", sa.String(64)),
)
audit_prompt = sa.Table(
    "audit_prompt",
    _hex_columns,
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("text_json", sa.Text),
)

_event_text = sa.table(
    "audit_event",
    sa.column("id"),
    sa.column("payload_json"),
    sa.column("prev_hash"),
    sa.column("hash"),
)
"""`audit_event` with untyped columns: `0014_audit_blobs` writes text there (the column is
text then), the downgrade of `0017_audit_compact` its deflated bytes."""


@dataclass
class RepackReport:
    """What a conversion did."""

    rows: int = 0
    """Rows rewritten (their payload, or only their link)."""
    conversations: int = 0
    """Conversations whose chain was linked again."""
    skipped: list[str] = field(default_factory=list)
    """Conversations left as they were because their chain did not verify."""
    locked_rows: int = 0
    """Encrypted rows left as they were (no master key, or their key destroyed)."""


Mode = Literal["pack", "unpack", "unzip"]


def repack_log(conn: Connection, provider: KeyProvider | None) -> RepackReport:
    """Pack every row's content fields into blobs and link the chains again."""
    return _convert(conn, provider, "pack")


def unpack_log(conn: Connection, provider: KeyProvider | None) -> RepackReport:
    """Put every blob's value back into its rows and link the chains again."""
    return _convert(conn, provider, "unpack")


def unzip_log(conn: Connection, provider: KeyProvider | None) -> RepackReport:
    """Seal again plain every envelope sealed deflated (`zip`, from `0017_audit_compact`
    on) and link the chains again: the downgrade of `0017`, for the code before it.

    Without the master key such envelopes stay as they are (`locked_rows` counts them):
    still verifiable, but the code before `0017` cannot decrypt them into text.
    """
    return _convert(conn, provider, "unzip")


def _convert(conn: Connection, provider: KeyProvider | None, mode: Mode) -> RepackReport:
    keys = None if provider is None else DataKeys(provider)
    report = RepackReport()
    ids = list(conn.execute(select(audit_event.c.conversation_id).distinct()).scalars())
    for cid in sorted(ids):
        _conversation(conn, cid, keys, report, mode)
    return report


def _conversation(
    conn: Connection, cid: str, keys: DataKeys | None, report: RepackReport, mode: Mode
) -> None:
    rows = [
        _Row(r._mapping, compact.inflate(r.payload_json))
        for r in conn.execute(
            select(audit_event)
            .where(audit_event.c.conversation_id == cid)
            .order_by(audit_event.c.seq, audit_event.c.id)
        )
    ]
    head_row = conn.execute(
        select(audit_head.c.seq, audit_head.c.hash).where(audit_head.c.conversation_id == cid)
    ).first()
    head = None if head_row is None else Head(head_row.seq, head_row.hash)
    shas = {r.prompt_sha256 for r in rows if r.prompt_sha256}
    prompts = {
        sha: json.loads(text)
        for sha, text in conn.execute(
            select(audit_prompt.c.sha256, audit_prompt.c.text_json).where(
                audit_prompt.c.sha256.in_(sorted(shas))
            )
        )
    }
    if not verify_chain(cid, rows, head=head, prompts=prompts).ok:
        report.skipped.append(cid)
        return
    kids = [
        str(json.loads(r.payload_json).get("kid"))
        for r in rows
        if crypto.is_envelope_text(r.payload_json)
    ]
    opener = PayloadOpener(keys, crypto.load_rows(conn, kids) if kids else {})
    convert = _Converter(conn, keys, opener, report)
    prev, changed = GENESIS_HASH, False
    for r in rows:
        if mode == "pack":
            payload_json = convert.pack(r)
        else:
            payload_json = convert.unpack(r) if mode == "unpack" else convert.unzip(r)
        if payload_json == r.payload_json and prev == r.prev_hash:
            prev = r.hash
            continue
        digest = spliced_row_hash(
            conversation_id=cid,
            seq=r.seq,
            event_id=r.event_id,
            kind=r.kind,
            turn_id=r.turn_id,
            created_at=r.created_at,
            payload_json=payload_json,
            prompt_sha256=r.prompt_sha256,
            prev_hash=prev,
        )
        conn.execute(
            update(_event_text)
            .where(_event_text.c.id == r.id)
            .values(
                # 0014 runs on text columns; the downgrade of 0017 on its deflated bytes.
                payload_json=compact.deflate(payload_json) if mode == "unzip" else payload_json,
                prev_hash=prev,
                hash=digest,
            )
        )
        prev, changed = digest, True
        report.rows += 1
    if changed:
        conn.execute(
            update(audit_head).where(audit_head.c.conversation_id == cid).values(hash=prev)
        )
        report.conversations += 1
    convert.flush()


@dataclass
class _Converter:
    conn: Connection
    keys: DataKeys | None
    opener: PayloadOpener
    report: RepackReport
    made: dict[str, tuple[str | None, str]] = field(default_factory=dict)
    _addresses: dict[str | None, blobs.Addresses] = field(default_factory=dict)

    def addresses(self, kid: str | None) -> blobs.Addresses:
        if kid not in self._addresses:
            key = None if kid is None else self.opener.address_key(kid)
            self._addresses[kid] = blobs.Addresses(key)
        return self._addresses[kid]

    def pack(self, row: Any) -> str:
        stored = json.loads(row.payload_json)
        if not crypto.is_envelope(stored):
            if _has_refs(stored):
                return str(row.payload_json)
            packer = blobs.Packer(self.addresses(None))
            packed = {
                k: v if k in crypto.CLEAR_FIELDS else packer.pack(v) for k, v in stored.items()
            }
            self.made.update({ref: (None, text) for ref, text in packer.made.items()})
            return canonical_json(packed)
        opened = self._open(row, stored)
        if opened is None or _has_refs(opened):
            return str(row.payload_json)
        kid = str(stored["kid"])
        packer = blobs.Packer(self.addresses(kid))
        parts = crypto.split(opened, packer.pack)
        self.made.update({ref: (kid, text) for ref, text in packer.made.items()})
        return self._seal(row, parts, kid)

    def unzip(self, row: Any) -> str:
        """The row's envelope sealed plain (exactly the same plaintext) if it was deflated."""
        stored = json.loads(row.payload_json)
        if not crypto.is_envelope(stored) or stored.get("zip") != crypto.DEFLATED:
            return str(row.payload_json)
        kid = str(stored["kid"])
        key_row = self.opener.key_row(kid)
        if key_row is None or key_row.destroyed:
            return str(row.payload_json)  # Shredded: no form of it is readable.
        if self.keys is None:
            self.report.locked_rows += 1  # Left as it is: see `unzip_log`.
            return str(row.payload_json)
        aead = self.keys.unwrapped(key_row)
        associated = crypto.aad(row.conversation_id, row.event_id, row.kind)
        nonce = base64.b64decode(stored["nonce"])
        plain = aead.decrypt(nonce, base64.b64decode(stored["ct"]), associated)
        envelope = {k: v for k, v in stored.items() if k != "zip"}
        nonce = os.urandom(12)
        ct = aead.encrypt(nonce, compact.inflate_bytes(plain), associated)
        envelope.update(nonce=base64.b64encode(nonce).decode(), ct=base64.b64encode(ct).decode())
        return canonical_json(envelope)

    def unpack(self, row: Any) -> str:
        stored = json.loads(row.payload_json)
        if not crypto.is_envelope(stored):
            if not _has_refs(stored):
                return str(row.payload_json)
            return canonical_json(self._expanded(stored))
        opened = self._open(row, stored)
        if opened is None or not _has_refs(opened):
            return str(row.payload_json)
        return self._seal(row, crypto.split(self._expanded(opened)), str(stored["kid"]))

    def flush(self) -> None:
        """Insert the blobs the packed rows refer to (in the text form of 0014)."""
        if self.made:
            keys = self.keys
            blobs.write_text_form(
                self.conn,
                self.made,
                lambda kid: None if kid is None or keys is None else keys.cipher_of(kid),
            )
            self.made = {}

    def _open(self, row: Any, envelope: dict[str, Any]) -> dict[str, Any] | None:
        """The decrypted payload, or `None` when its key is not at hand."""
        live = self.opener.address_key(str(envelope.get("kid")))
        if live is None:
            self.report.locked_rows += 1
            return None
        associated = crypto.aad(row.conversation_id, row.event_id, row.kind)
        return self.opener.open(envelope, associated)

    def _seal(self, row: Any, parts: crypto.Split, kid: str) -> str:
        assert self.keys is not None
        associated = crypto.aad(row.conversation_id, row.event_id, row.kind)
        aead = self.keys.cipher_of(kid)
        envelope = crypto.seal(parts, kid=kid, aead=aead, associated=associated, deflate=False)
        return canonical_json(envelope)  # Plain inside: the form of 0014 (see 0017).

    def _expanded(self, payload: dict[str, Any]) -> dict[str, Any]:
        values = _load_values(self.conn, _content_refs(payload), self.opener.open_blob)
        return {
            k: v if k in crypto.CLEAR_FIELDS else blobs.expand(v, values)
            for k, v in payload.items()
        }


class _Row:
    """A stored row with its payload as text (whatever form the column holds it in)."""

    def __init__(self, mapping: Any, payload_json: str) -> None:
        self.__dict__.update(mapping)
        self.payload_json = payload_json

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def _content_refs(payload: dict[str, Any]) -> set[str]:
    return blobs.references({k: v for k, v in payload.items() if k not in crypto.CLEAR_FIELDS})


def _has_refs(payload: dict[str, Any]) -> bool:
    return bool(_content_refs(payload))


def _load_values(
    conn: Connection, refs: set[str], open_blob: Callable[[str, str, bytes | str], str | None]
) -> dict[str, Any]:
    """The values of `refs` and of every ref inside them.

    Raises:
        AuditKeyError: a blob is missing or does not decrypt (nothing is written then).
    """
    values: dict[str, Any] = {}
    todo = set(refs)
    while todo:
        found = blobs.load(conn, todo)
        missing: Sequence[str] = sorted(todo - found.keys())
        if missing:
            raise AuditKeyError(f"audit blob {missing[0]} is missing; the log cannot be unpacked")
        later: set[str] = set()
        for ref, (kid, body) in found.items():
            text = compact.inflate(body) if kid is None else open_blob(kid, ref, body)
            values[ref] = crypto.ERASED if text is None else json.loads(text)
            later |= blobs.references(values[ref])
        todo = later - values.keys()
    return values


# Migration `0017_audit_compact`: the stored form of the texts (hashes unchanged).

# Untyped columns: the values are bytes or text as the migration's step needs them.
_event_stored = sa.table("audit_event", sa.column("id"), sa.column("payload_json"))
_blob_stored = sa.table("audit_blob", sa.column("ref"), sa.column("kid"), sa.column("body"))
_BATCH = 500


@dataclass
class CompactReport:
    """What a change of stored form did."""

    rows: int = 0
    """Event rows whose stored payload changed."""
    blobs: int = 0
    """Blob rows whose stored body changed."""
    locked_blobs: int = 0
    """Sealed blobs left deflated inside (no master key given to the downgrade)."""


def compact_log(conn: Connection) -> CompactReport:
    """Store every payload and clear blob deflated, and sealed blobs as raw bytes.

    The row hashes cover the JSON texts, which do not change: the chains verify as before,
    the heads stay, and no key is needed (an envelope is deflated as it stands; a sealed
    blob's base64 is decoded, its plaintext untouched).
    """
    return _restore(conn, to_text=False, keys=None)


def expand_log(conn: Connection, provider: KeyProvider | None) -> CompactReport:
    """The reverse of `compact_log` (a downgrade): texts as UTF-8, sealed blobs as base64.

    A blob sealed since `0017` is deflated inside; the code before cannot read that, so it
    is opened and sealed again plain, which needs the master key: without it, such blobs
    stay as they are (`locked_blobs` counts them).
    """
    return _restore(conn, to_text=True, keys=None if provider is None else DataKeys(provider))


def _restore(conn: Connection, *, to_text: bool, keys: DataKeys | None) -> CompactReport:
    report = CompactReport()
    resealer = _Resealer(conn, keys) if to_text else None
    # Text goes back as text on SQLite (its columns take either); PostgreSQL's bytea column
    # takes the UTF-8 bytes, and the migration turns it to text afterwards.
    as_str = to_text and conn.dialect.name != "postgresql"
    last = -1
    while True:  # Batches by id: a large log is never held in memory at once.
        rows = list(
            conn.execute(
                select(_event_stored.c.id, _event_stored.c.payload_json)
                .where(_event_stored.c.id > last)
                .order_by(_event_stored.c.id)
                .limit(_BATCH)
            )
        )
        if not rows:
            break
        for row_id, stored in rows:
            new = _stored_value(_payload_form(stored, to_text), stored, as_str)
            if new is not None:
                conn.execute(
                    update(_event_stored)
                    .where(_event_stored.c.id == row_id)
                    .values(payload_json=new)
                )
                report.rows += 1
        last = rows[-1][0]
    ref = ""
    while True:
        found = list(
            conn.execute(
                select(_blob_stored.c.ref, _blob_stored.c.kid, _blob_stored.c.body)
                .where(_blob_stored.c.ref > ref)
                .order_by(_blob_stored.c.ref)
                .limit(_BATCH)
            )
        )
        if not found:
            break
        for blob_ref, kid, body in found:
            plain = body
            if resealer is not None and kid is not None:
                plain = resealer.plain_inside(blob_ref, kid, body)
            new = _stored_value(_body_form(kid, plain, to_text), body, as_str)
            if new is not None:
                conn.execute(
                    update(_blob_stored).where(_blob_stored.c.ref == blob_ref).values(body=new)
                )
                report.blobs += 1
        ref = found[-1][0]
    if resealer is not None:
        report.locked_blobs = resealer.locked
    return report


@dataclass
class _Resealer:
    """Seals blobs again with plain plaintext (for the code before `0017`)."""

    conn: Connection
    keys: DataKeys | None
    rows: dict[str, Any] = field(default_factory=dict)
    locked: int = 0
    """Blobs left deflated inside (no master key given)."""

    def plain_inside(
        self, ref: str, kid: str, body: bytes | memoryview | str
    ) -> bytes | memoryview | str:
        """`body`, sealed again if its plaintext is deflated (base64 text then)."""
        raw = _as_bytes(body)
        if isinstance(body, str) or _is_base64(raw):
            return body  # Sealed before 0017: plain inside.
        if kid not in self.rows:
            self.rows.update(crypto.load_rows(self.conn, [kid]))
        row = self.rows.get(kid)
        if row is None or row.destroyed:
            return body  # Shredded: nobody reads it, in any form.
        if self.keys is None:
            self.locked += 1  # Left as it is: see `expand_log`.
            return body
        aead = self.keys.unwrapped(row)
        plain = blobs.decrypt(raw, ref, aead)
        if plain is None:
            return body  # Edited: left for `audit verify` to report.
        if not compact.is_deflated(plain):
            return body
        return blobs.seal_text(compact.inflate(plain), ref, aead)


def _stored_value(
    new: bytes | None, old: bytes | memoryview | str, as_str: bool
) -> bytes | str | None:
    """What to write (`None`: nothing), as text when the column is to hold text."""
    if not as_str:
        return None if new is None or new == _as_bytes(old) else new
    if isinstance(old, str) and (new is None or new == _as_bytes(old)):
        return None
    return (new if new is not None else _as_bytes(old)).decode("utf-8", "surrogatepass")


def _as_bytes(value: bytes | memoryview | str) -> bytes:
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)


def _payload_form(stored: bytes | memoryview | str, to_text: bool) -> bytes | None:
    """A payload's stored value in the form asked for (UTF-8 bytes of the text, or
    deflated); `None` for a value that does not inflate (edited: left as it is)."""
    try:
        text = compact.inflate(stored)
    except (ValueError, UnicodeDecodeError):
        return None
    return text.encode("utf-8", "surrogatepass") if to_text else compact.deflate(text)


def _body_form(kid: str | None, body: bytes | memoryview | str, to_text: bool) -> bytes | None:
    """A blob body's stored value in the form asked for (a sealed one: base64 text's bytes,
    or raw)."""
    raw = _as_bytes(body)
    if kid is None:
        return _payload_form(body, to_text)
    looks_base64 = isinstance(body, str) or _is_base64(raw)
    if to_text:
        return raw if looks_base64 else base64.b64encode(raw)
    return base64.b64decode(raw) if looks_base64 else raw


def _is_base64(raw: bytes) -> bool:
    """Whether a sealed body is still the base64 text of 0014 (raw bytes are a 12-byte nonce
    and a ciphertext: they decode as base64 text of the right length by chance only once
    in a very long while, and a body of 28 bytes or less is no sealing at all)."""
    try:
        decoded = base64.b64decode(raw, validate=True)
    except ValueError:
        return False
    return len(decoded) > 28 and base64.b64encode(decoded) == raw
