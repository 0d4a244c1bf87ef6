"""Audit payload encryption per user at rest (crypto-shredding): the one seam.

With a master key (`FRONTDESK_MASTER_KEY`, 32 bytes base64, or a `KeyProvider` such as a
KMS), every audit payload of a conversation is stored as an envelope:

    {"enc": "aes-256-gcm", "kid": ..., "nonce": ..., "ct": ..., "clear": {...}, "fields": {...}}

`ct` is AES-256-GCM over the canonical JSON of the payload's content fields, under the data
key `kid` of the conversation's owner for the event's month, with the conversation id,
event id and kind as associated data (a ciphertext cannot be moved to another row).
`clear` keeps the operational fields (model, usage, latency, category, ids: `CLEAR_FIELDS`)
so `audit cost` needs no key; `fields` names the encrypted ones and their JSON type, so a
shredded payload reads back with a marker in each place. The chain hashes the envelope as
stored: `audit verify` needs no key.

Data keys live in `audit_key` (migration `0010_audit_keys`), wrapped by the master key and
filed under the owner's keyed ref (`frontdesk.audit.refs`, never the id or a plain digest of
it); `DataKeys` creates, caches (unwrapped, in process), destroys and re-wraps them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from frontdesk.audit import blobs, compact
from frontdesk.audit.chain import canonical_json
from frontdesk.errors import AuditKeyError

__all__ = [
    "CLEAR_FIELDS",
    "ENCRYPTION",
    "ERASED",
    "MASTER_KEY_ENV",
    "DataKeys",
    "KeyProvider",
    "MasterKey",
    "PayloadOpener",
    "as_provider",
    "is_envelope",
    "master_key_from_env",
    "period_of",
    "user_ref",
]

MASTER_KEY_ENV = "FRONTDESK_MASTER_KEY"
ENCRYPTION = "aes-256-gcm"
ERASED = "[erased]"
"""What an erased or shredded piece of content reads as."""

CLEAR_FIELDS = frozenset(
    {
        "expert", "model", "attempt", "settings", "prompt", "usage", "cost_usd",
        "latency_ms", "first_token_ms", "status_code", "provider_request_id", "stop_reason",
        "will_retry", "speculation", "output_type", "category", "triage_category", "kept",
        "handler_ran", "stage", "user_message_id", "client_message_id", "parent_id",
        "assistant_message_id", "summary_id", "covered_until_message_id", "prompt_versions",
    }
)  # fmt: skip
"""Payload fields stored in clear next to the ciphertext: operational data, no user content.
Every other field (texts, messages, wire bodies, outputs, errors, user ids) is encrypted."""

KEY_TTL_SECONDS = 60.0
"""How long a process trusts its cached data key before looking at the table again (an
erasure run by another process is seen within this time)."""

_meta = MetaData()
audit_key = Table(
    "audit_key",
    _meta,
    Column("kid", String(32), primary_key=True),
    Column("user_ref", String(64), nullable=False),
    Column("period", String(7), nullable=False),
    Column("wrapped_key", Text, nullable=False),
    Column("master_key_id", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("destroyed_at", String(40), nullable=True),
)


@runtime_checkable
class KeyProvider(Protocol):
    """Wraps and unwraps data keys with a master key it holds (a local key, or a KMS).

    `key_id` names the master key; it is stored with every data key it wrapped, so a wrong
    key is told apart from a damaged one, and rotation knows which keys are done.
    """

    @property
    def key_id(self) -> str:
        """A stable, non-secret name of the master key."""
        ...

    def wrap(self, data_key: bytes, context: bytes) -> bytes:
        """Encrypt a data key; `context` must be given again to unwrap it."""
        ...

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        """Decrypt a wrapped data key; raise `AuditKeyError` when this key cannot."""
        ...


class MasterKey:
    """A `KeyProvider` over a local 32-byte key (AES-256-GCM key wrapping)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise AuditKeyError(
                f"the audit master key must be 32 bytes (got {len(key)}); make one with"
                f' `python -c "import os,base64;print(base64.b64encode(os.urandom(32)).decode())"`'
                f" and set {MASTER_KEY_ENV}"
            )
        self._aead = AESGCM(key)
        digest = hmac.new(key, b"frontdesk audit master key id", hashlib.sha256).hexdigest()
        self._id = f"local:{digest[:16]}"

    @classmethod
    def from_text(cls, text: str, *, source: str = MASTER_KEY_ENV) -> MasterKey:
        """A key from its base64 text (standard or URL-safe alphabet)."""
        raw = text.strip()
        padded = raw + "=" * (-len(raw) % 4)
        try:
            if "-" in raw or "_" in raw:
                key = base64.urlsafe_b64decode(padded)
            else:
                key = base64.b64decode(padded, validate=True)
        except (binascii.Error, ValueError):
            raise AuditKeyError(f"{source} is not base64; give 32 random bytes in base64") from None
        return cls(key)

    @classmethod
    def generate(cls) -> MasterKey:
        """A new random key (tests, and a new key for `frontdesk audit rotate-key`)."""
        return cls(os.urandom(32))

    @property
    def key_id(self) -> str:
        """`local:` and 16 hex digits of an HMAC of the key (the key cannot be got back)."""
        return self._id

    def wrap(self, data_key: bytes, context: bytes) -> bytes:
        """nonce (12 bytes) + AES-GCM ciphertext of the data key."""
        nonce = os.urandom(12)
        return nonce + self._aead.encrypt(nonce, data_key, context)

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        """The data key, or `AuditKeyError` when this master key did not wrap it."""
        try:
            return self._aead.decrypt(wrapped[:12], wrapped[12:], context)
        except (InvalidTag, ValueError):
            raise AuditKeyError(
                "the audit master key cannot unwrap this data key: it is not the key the"
                f" database was encrypted with; set {MASTER_KEY_ENV} to that key"
            ) from None


def master_key_from_env(env: Mapping[str, str] | None = None) -> MasterKey | None:
    """The master key of `FRONTDESK_MASTER_KEY`, or `None` when it is unset or empty."""
    text = (os.environ if env is None else env).get(MASTER_KEY_ENV, "")
    return MasterKey.from_text(text) if text.strip() else None


def as_provider(key: bytes | str | KeyProvider | None) -> KeyProvider | None:
    """A `KeyProvider` from what `Orchestrator(audit_key=...)` accepts; `None` reads the env.

    Bytes are the raw 32-byte key, or its base64 text as bytes; a str is base64 text.
    """
    if key is None:
        return master_key_from_env()
    if isinstance(key, bytes):
        return MasterKey(key) if len(key) == 32 else MasterKey.from_text(key.decode("ascii"))
    if isinstance(key, str):
        return MasterKey.from_text(key, source="audit_key")
    if isinstance(key, KeyProvider):
        return key
    raise AuditKeyError(f"audit_key must be bytes, base64 text or a KeyProvider, not {key!r}")


def user_ref(user_id: str | None) -> str:
    """The plain digest of a user id (`None`, single-user mode, is user ""): what keys were
    filed under before revision 0018; they are filed under `AuditLog.refs` now (keyed with
    a master key, see `frontdesk.audit.refs`), and this is looked for only to find old ones."""
    return hashlib.sha256((user_id or "").encode("utf-8", "surrogatepass")).hexdigest()[:32]


def period_of(created_at: str) -> str:
    """The key period ("YYYY-MM", UTC) of a canonical `created_at` text."""
    return created_at[:7]


def now_text() -> str:
    """Now as canonical UTC text."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def is_envelope(payload: Any) -> bool:
    """Whether a decoded payload is an encrypted envelope."""
    return isinstance(payload, dict) and payload.get("enc") == ENCRYPTION and "ct" in payload


def is_envelope_text(payload_json: str) -> bool:
    """Whether a stored payload text is an encrypted envelope (without parsing it)."""
    return payload_json.startswith('{"clear":') and f'"enc":"{ENCRYPTION}"' in payload_json


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def aad(conversation_id: str, event_id: str, kind: str) -> bytes:
    """The associated data binding a ciphertext to its row."""
    return "\x00".join((conversation_id, event_id, kind)).encode("utf-8", "surrogatepass")


def _wrap_context(kid: str, ref: str, period: str) -> bytes:
    return f"frontdesk-audit-key\x00{kid}\x00{ref}\x00{period}".encode()


def _type_tag(value: Any) -> str:
    if isinstance(value, str):
        return "s"
    if isinstance(value, list):
        return "l"
    if isinstance(value, dict):
        return "d"
    return "o"


_SHREDDED: dict[str, Any] = {"s": ERASED, "l": [], "d": {"erased": ERASED}, "o": None}


@dataclass(frozen=True)
class Split:
    """A payload split for sealing: clear fields, the content's canonical JSON, its types."""

    clear: dict[str, Any]
    secret_json: str
    fields: dict[str, str]


def split(payload: Mapping[str, Any], pack: Callable[[Any], Any] | None = None) -> Split:
    """Split a payload (raises `AuditPayloadError` for what is not JSON, before any write).

    `pack` (`audit.blobs.Packer.pack`) replaces each content field's large parts by
    references before it is encrypted; the type tags are the unpacked values' own.
    """
    secret = {k: v for k, v in payload.items() if k not in CLEAR_FIELDS}
    clear = {k: v for k, v in payload.items() if k in CLEAR_FIELDS}
    canonical_json(clear)
    fields = {k: _type_tag(v) for k, v in secret.items()}
    if pack is not None:
        secret = {k: pack(v) for k, v in secret.items()}
    return Split(clear, canonical_json(secret), fields)


DEFLATED = "deflate-1"
"""The envelope's `zip` when its content was deflated (`audit.compact`) before it was
sealed (from migration `0017_audit_compact` on); without `zip` it was sealed plain."""


def seal(
    parts: Split, *, kid: str, aead: AESGCM, associated: bytes, deflate: bool = True
) -> dict[str, Any]:
    """The envelope of a split payload (content encrypted, `CLEAR_FIELDS` in clear).

    With `deflate` (the default) the content is deflated before it is sealed when that
    makes it shorter (`zip` says so); the sealed length then follows how repetitive the
    content is as well as how long, a little more than a plain sealing shows. `deflate=False`
    seals it plain, the form of the code before `0017_audit_compact`.
    """
    nonce = os.urandom(12)
    plain = parts.secret_json.encode("utf-8", "surrogatepass")
    packed = compact.deflate(parts.secret_json) if deflate else plain
    envelope = {
        "enc": ENCRYPTION,
        "kid": kid,
        "nonce": _b64(nonce),
        "ct": _b64(aead.encrypt(nonce, packed, associated)),
        "clear": parts.clear,
        "fields": parts.fields,
    }
    if packed is not plain and compact.is_deflated(packed):
        envelope["zip"] = DEFLATED
    return envelope


def shredded(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """What an envelope reads as once its key is destroyed: markers in place of content."""
    fields: Mapping[str, str] = envelope.get("fields") or {}
    out = dict(envelope.get("clear") or {})
    out.update({k: _SHREDDED.get(tag) for k, tag in fields.items()})
    out["erased"] = True
    return out


@dataclass(frozen=True)
class _KeyRow:
    kid: str
    user_ref: str
    period: str
    wrapped_key: str
    master_key_id: str
    destroyed: bool


@dataclass
class Cached:
    kid: str
    aead: AESGCM
    row: dict[str, Any]
    confirmed: bool
    """Seen committed in the table (else re-inserted, idempotently, with each batch)."""
    loaded: float
    mac: bytes = b""
    """The key of the blob addresses of this data key (`audit.blobs.address_key`)."""


ENCRYPTED = "[encrypted]"
"""What a content field reads as in a view made without decryption."""


def undecrypted(envelope: Mapping[str, Any]) -> dict[str, Any]:
    """An envelope's clear fields, with `[encrypted]` in place of each content field."""
    fields: Mapping[str, str] = envelope.get("fields") or {}
    out = dict(envelope.get("clear") or {})
    out.update({k: ENCRYPTED if tag == "s" else _SHREDDED.get(tag) for k, tag in fields.items()})
    out["encrypted"] = True
    return out


class PayloadOpener:
    """Decrypts the envelopes of rows read together (their key rows loaded at once).

    With `decrypt=False` it decrypts nothing: content fields read as `[encrypted]` (the
    clear fields, usage and cost, stay), for views and reports that need no key.
    """

    def __init__(
        self, keys: DataKeys | None, rows: Mapping[str, _KeyRow], *, decrypt: bool = True
    ) -> None:
        self._keys = keys
        self._rows = rows
        self._decrypt = decrypt

    def open(self, envelope: Mapping[str, Any], associated: bytes) -> dict[str, Any]:
        """The payload of `envelope`, or markers when its key is destroyed.

        Raises:
            AuditKeyError: no master key is configured, or it is not the database's.
        """
        row = self._rows.get(str(envelope.get("kid")))
        if row is None or row.destroyed:
            return shredded(envelope)
        if not self._decrypt:
            return undecrypted(envelope)
        if self._keys is None:
            raise AuditKeyError(
                "these audit payloads are encrypted; set FRONTDESK_MASTER_KEY (or pass"
                " audit_key=) to the master key to read them (`audit verify` needs none)"
            )
        aead = self._keys.unwrapped(row)
        try:
            plain = aead.decrypt(_unb64(envelope["nonce"]), _unb64(envelope["ct"]), associated)
        except (InvalidTag, ValueError, KeyError):
            raise AuditKeyError(
                f"audit payload under key {row.kid} does not decrypt: it was moved from another"
                " row or edited (`frontdesk audit verify` tells which)"
            ) from None
        out = dict(envelope.get("clear") or {})
        if envelope.get("zip") == DEFLATED:
            plain = compact.inflate_bytes(plain)
        out.update(json.loads(plain.decode("utf-8", "surrogatepass")))
        return out

    def open_blob(self, kid: str, ref: str, body: bytes | str) -> str | None:
        """A sealed blob's JSON text; `None` once its key is destroyed.

        Raises:
            AuditKeyError: the blob does not decrypt under its ref (edited or swapped).
        """
        row = self._rows.get(kid)
        if row is None or row.destroyed or self._keys is None:
            return None
        text = blobs.unseal(body, ref, self._keys.unwrapped(row))
        if text is None:
            raise AuditKeyError(f"audit blob {ref} does not decrypt under key {kid} (edited)")
        return text

    def address_key(self, kid: str) -> bytes | None:
        """The blob address key of a live data key the rows were read with (`None` else)."""
        row = self._rows.get(kid)
        if row is None or row.destroyed or self._keys is None:
            return None
        self._keys.unwrapped(row)
        return self._keys.mac_of(kid)


def _insert(conn: Connection) -> Any:
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    return dialect_insert(audit_key).on_conflict_do_nothing(index_elements=["kid"])


class DataKeys:
    """The data keys of one database under one master key, cached unwrapped in process.

    The turn's hot path reads no key from the database: a user's key for the month is
    looked up once, then trusted for `KEY_TTL_SECONDS`. A key made by this process is
    inserted in the batch's own transaction, and again (idempotently) with later batches
    until a later look-up sees it committed, so a rolled-back batch never loses it.
    """

    def __init__(self, provider: KeyProvider, *, ttl: float = KEY_TTL_SECONDS) -> None:
        self.provider = provider
        self._ttl = ttl
        self._writing: dict[tuple[str, str], Cached] = {}
        self._unwrapped: dict[tuple[str, str], AESGCM] = {}
        self._ciphers: dict[str, AESGCM] = {}
        self._macs: dict[str, bytes] = {}

    # Writing.

    def for_writing(
        self, conn: Connection, ref: str, period: str, memo: dict[tuple[str, str], Cached]
    ) -> tuple[str, AESGCM]:
        """The kid and cipher for a new payload of user `ref` in `period`."""
        key = (ref, period)
        entry = memo.get(key)
        if entry is None:
            entry = self._writing.get(key)
            if entry is None or time.monotonic() - entry.loaded > self._ttl:
                entry = self._load_live(conn, ref, period) or self._create(ref, period)
                self._writing[key] = entry
            if not entry.confirmed:
                conn.execute(_insert(conn), [entry.row])
            memo[key] = entry
        return entry.kid, entry.aead

    def ready(self, ref: str, period: str) -> bool:
        """Whether a batch of user `ref` in `period` needs no key statement (cached, and
        known to be committed)."""
        entry = self._writing.get((ref, period))
        return entry is not None and entry.confirmed

    def _load_live(self, conn: Connection, ref: str, period: str) -> Cached | None:
        query = (
            select(audit_key)
            .where(
                audit_key.c.user_ref == ref,
                audit_key.c.period == period,
                audit_key.c.destroyed_at.is_(None),
                audit_key.c.master_key_id == self.provider.key_id,
            )
            .order_by(audit_key.c.created_at.desc())
            .limit(1)
        )
        found = conn.execute(query).mappings().first()
        if found is None:
            return None
        row = _row(found)
        aead = self.unwrapped(row)
        return Cached(row.kid, aead, dict(found), True, time.monotonic(), self._macs[row.kid])

    def _create(self, ref: str, period: str) -> Cached:
        kid, data_key = secrets.token_hex(16), AESGCM.generate_key(bit_length=256)
        wrapped = self.provider.wrap(data_key, _wrap_context(kid, ref, period))
        row = {
            "kid": kid,
            "user_ref": ref,
            "period": period,
            "wrapped_key": _b64(wrapped),
            "master_key_id": self.provider.key_id,
            "version": 1,
            "created_at": now_text(),
            "destroyed_at": None,
        }
        aead = self._ciphers[kid] = AESGCM(data_key)
        mac = self._macs[kid] = blobs.address_key(data_key)
        return Cached(kid, aead, row, False, time.monotonic(), mac)

    # Reading.

    def unwrapped(self, row: _KeyRow) -> AESGCM:
        """The cipher of a live key row (unwrapped once per process)."""
        key = (row.kid, row.wrapped_key)
        aead = self._unwrapped.get(key)
        if aead is None:
            if row.master_key_id != self.provider.key_id:
                raise AuditKeyError(
                    f"data key {row.kid} is wrapped by master key {row.master_key_id}, but the"
                    f" configured one is {self.provider.key_id}; set {MASTER_KEY_ENV} to the"
                    " key the database uses (or finish `frontdesk audit rotate-key`)"
                )
            context = _wrap_context(row.kid, row.user_ref, row.period)
            data = self.provider.unwrap(_unb64(row.wrapped_key), context)
            aead = self._unwrapped[key] = self._ciphers[row.kid] = AESGCM(data)
            self._macs[row.kid] = blobs.address_key(data)
        return aead

    def mac_of(self, kid: str) -> bytes:
        """The blob address key of a data key this process made or unwrapped."""
        return self._macs[kid]

    def cipher_of(self, kid: str) -> AESGCM:
        """The cipher of a data key this process made or unwrapped."""
        return self._ciphers[kid]

    def cached(self, ref: str, period: str) -> str | None:
        """The kid a batch of user `ref` in `period` will most likely be sealed with (the
        cached key, still fresh), so its payloads can be packed before the transaction."""
        entry = self._writing.get((ref, period))
        if entry is None or time.monotonic() - entry.loaded > self._ttl:
            return None
        return entry.kid

    def forget(self, ref: str | None = None) -> None:
        """Drop cached keys (of one user, or all): after an erasure or a retention run."""
        self._writing = {k: v for k, v in self._writing.items() if ref is not None and k[0] != ref}
        if ref is None:
            self._unwrapped.clear()
            self._ciphers.clear()
            self._macs.clear()


def load_rows(conn: Connection, kids: Iterable[str]) -> dict[str, _KeyRow]:
    """The key rows of `kids` (destroyed ones included)."""
    wanted = sorted(set(kids))
    out: dict[str, _KeyRow] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        for found in conn.execute(select(audit_key).where(audit_key.c.kid.in_(chunk))).mappings():
            row = _row(found)
            out[row.kid] = row
    return out


def _row(found: Any) -> _KeyRow:
    return _KeyRow(
        kid=found["kid"],
        user_ref=found["user_ref"],
        period=found["period"],
        wrapped_key=found["wrapped_key"],
        master_key_id=found["master_key_id"],
        destroyed=found["destroyed_at"] is not None,
    )


def live_master_ids(conn: Connection) -> set[str]:
    """The master key ids wrapping live data keys (empty: nothing is encrypted, or all shredded)."""
    query = select(audit_key.c.master_key_id).where(audit_key.c.destroyed_at.is_(None)).distinct()
    return set(conn.execute(query).scalars())


def destroy(
    conn: Connection,
    *,
    ref: str | None = None,
    before_period: str | None = None,
    refs: Collection[str] | None = None,
) -> int:
    """Destroy live data keys of user `ref` (or of any of `refs`: the keyed ref and the plain
    digest older versions filed under), or of every period before `before_period`."""
    where: list[ColumnElement[bool]] = [audit_key.c.destroyed_at.is_(None)]
    if ref is not None:
        where.append(audit_key.c.user_ref == ref)
    if refs is not None:
        where.append(audit_key.c.user_ref.in_(sorted(refs)))
    if before_period is not None:
        where.append(audit_key.c.period < before_period)
    result = conn.execute(
        update(audit_key).where(*where).values(wrapped_key="", destroyed_at=now_text())
    )
    return int(result.rowcount or 0)


def refile_destroyed(conn: Connection, old: str, new: str) -> int:
    """File the destroyed keys of ref `old` under `new` (their `user_ref` is all that is left
    of them): an erasure takes the plain digest of older versions out of the table."""
    query = update(audit_key).where(
        audit_key.c.user_ref == old, audit_key.c.destroyed_at.is_not(None)
    )
    return int(conn.execute(query.values(user_ref=new)).rowcount or 0)


def count_live(conn: Connection, *, before_period: str) -> int:
    """How many live keys `destroy(before_period=...)` would destroy."""
    query = select(audit_key.c.kid).where(
        audit_key.c.destroyed_at.is_(None), audit_key.c.period < before_period
    )
    return len(list(conn.execute(query).scalars()))


def rewrap(conn: Connection, old: KeyProvider, new: KeyProvider) -> int:
    """Re-wrap every live data key of `old` with `new`; keys already under `new` are skipped.

    Each key is its own UPDATE, so an interrupted rotation is finished by running it again.

    Raises:
        AuditKeyError: a live key is under a third master key, or `old` cannot unwrap one.
    """
    others = live_master_ids(conn) - {old.key_id, new.key_id}
    if others:
        raise AuditKeyError(
            f"data keys are wrapped by master key(s) {sorted(others)}, neither the old key"
            f" ({old.key_id}) nor the new one ({new.key_id})"
        )
    query = select(audit_key).where(
        audit_key.c.destroyed_at.is_(None), audit_key.c.master_key_id == old.key_id
    )
    done = 0
    for found in list(conn.execute(query).mappings()):
        context = _wrap_context(found["kid"], found["user_ref"], found["period"])
        data = old.unwrap(_unb64(found["wrapped_key"]), context)
        conn.execute(
            update(audit_key)
            .where(audit_key.c.kid == found["kid"])
            .values(
                wrapped_key=_b64(new.wrap(data, context)),
                master_key_id=new.key_id,
                version=found["version"] + 1,
            )
        )
        done += 1
    return done
