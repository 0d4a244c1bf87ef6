"""Audit payload encryption per user at rest (crypto-shredding): frozen copy of
`audit/crypto.py`, the reading and sealing of envelopes and the unwrapping of data keys the
conversions of `0014_audit_blobs` and `0017_audit_compact` run.

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

Data keys live in `audit_key` (migration `0010_audit_keys`), wrapped by the master key;
`DataKeys` unwraps them (once each). The conversions make no key: they seal again under the
row's own key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import (
    Column,
    Connection,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    select,
)

from frontdesk.errors import AuditKeyError
from frontdesk.migrations._frozen_audit import blobs, compact
from frontdesk.migrations._frozen_audit.chain import canonical_json

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


class PayloadOpener:
    """Decrypts the envelopes of rows read together (their key rows loaded at once)."""

    def __init__(self, keys: DataKeys | None, rows: Mapping[str, _KeyRow]) -> None:
        self._keys = keys
        self._rows = rows

    def open(self, envelope: Mapping[str, Any], associated: bytes) -> dict[str, Any]:
        """The payload of `envelope`, or markers when its key is destroyed.

        Raises:
            AuditKeyError: no master key is configured, or it is not the database's.
        """
        row = self._rows.get(str(envelope.get("kid")))
        if row is None or row.destroyed:
            return shredded(envelope)
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

    def key_row(self, kid: str) -> _KeyRow | None:
        """The key row of `kid` the rows were read with (destroyed ones included)."""
        return self._rows.get(kid)

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


class DataKeys:
    """The data keys of one database under one master key, unwrapped once each."""

    def __init__(self, provider: KeyProvider) -> None:
        self.provider = provider
        self._unwrapped: dict[tuple[str, str], AESGCM] = {}
        self._ciphers: dict[str, AESGCM] = {}
        self._macs: dict[str, bytes] = {}

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
