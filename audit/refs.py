"""Keyed digests of user ids: the names a user's records are filed under once the id is gone.

A user's data keys (`audit_key.user_ref`), their own audit chain (`user:<ref>`), the owner of
their conversations once erased (`erased:<ref>`) and the lock of their memory jobs name the
user by a digest, so no id is stored in clear where a record outlives the user. A plain
SHA-256 of an id from a small space (`cust-NNNNNNNN`) is inverted by trying every id, in
seconds, so with a master key each digest is an HMAC-SHA256 under the database's **ref key**
(one subkey per purpose, so the digests of one user in different tables do not match):

- the ref key is 32 random bytes made once per audit database, on its first open with a
  master key, and stored only wrapped by the master key (`audit_ref_key`, migration
  `0018_keyed_refs`), exactly as a data key is. A `KeyProvider` (a KMS) needs nothing but
  `wrap`/`unwrap`: the ref key, like a data key, is unwrapped once and held in the process;
- it is not derived from the master key, so `frontdesk audit rotate-key` re-wraps it and the
  refs stay the same (a derived key would change with the master key and orphan every ref).

Without a master key there is no secret to key a digest with: the refs are the plain
digests older versions wrote (`UNKEYED`), and nothing pretends otherwise (docs/privacy.md).
`legacy` is that plain digest, still looked for where older versions filed records under it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from datetime import UTC, datetime
from typing import Literal

from sqlalchemy import Column, Connection, Integer, MetaData, String, Table, Text, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from frontdesk.audit.crypto import MASTER_KEY_ENV, KeyProvider, user_ref
from frontdesk.errors import AuditKeyError

__all__ = [
    "PURPOSES",
    "UNKEYED",
    "JobLockPurpose",
    "RefPurpose",
    "UserRefs",
    "legacy",
    "load_refs",
    "master_of",
    "read_refs",
    "rewrap_ref_key",
]

RefPurpose = Literal["data_key", "user_chain", "erased_owner", "memory_lock", "erasure_lock"]
"""What a ref names: a user's data keys, audit chain, erased conversations, memory jobs,
erasure jobs."""
PURPOSES: tuple[RefPurpose, ...] = (
    "data_key",
    "user_chain",
    "erased_owner",
    "memory_lock",
    "erasure_lock",
)

JobLockPurpose = Literal["memory_lock", "erasure_lock"]
"""The purposes whose refs name a user in a job's lock (`UserRefs.job_lock`)."""

REF_KEY_NAME = "user_refs"
"""The one row of `audit_ref_key` (a name, so a later key for another use has its own)."""

_meta = MetaData()
audit_ref_key = Table(
    "audit_ref_key",
    _meta,
    Column("name", String(32), primary_key=True),
    Column("wrapped_key", Text, nullable=False),
    Column("master_key_id", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("created_at", String(40), nullable=False),
)


def legacy(user_id: str | None) -> str:
    """The plain digest of a user id (32 hex digits), as versions before 0018 filed under.

    `None` (single-user mode) is user "". Anyone can compute it from a guess: it is looked
    for only to find, erase and re-file what older versions stored under it.
    """
    return user_ref(user_id)


class UserRefs:
    """The digests a user is filed under: keyed (HMAC-SHA256 per purpose) with a ref key, or
    the plain `legacy` digest without one."""

    def __init__(self, key: bytes | None) -> None:
        self._subkeys: dict[str, bytes] | None = None
        if key is not None:
            self._subkeys = {
                p: hmac.digest(key, b"frontdesk user ref\x00" + p.encode(), "sha256")
                for p in PURPOSES
            }

    @property
    def keyed(self) -> bool:
        """Whether the refs are keyed (a master key is configured): only then do they reveal
        nothing to whoever tries every plausible user id."""
        return self._subkeys is not None

    def ref(self, purpose: RefPurpose, user_id: str | None) -> str:
        """The user's ref for `purpose` (32 hex digits; `None` is user "")."""
        if self._subkeys is None:
            return legacy(user_id)
        data = (user_id or "").encode("utf-8", "surrogatepass")
        return hmac.new(self._subkeys[purpose], data, hashlib.sha256).hexdigest()[:32]

    def job_lock(self, purpose: JobLockPurpose, user_id: str) -> str:
        """The lock of a user's jobs of one kind (one at a time, in order), naming the user by
        their ref: a job row outlives an erasure, so a plain digest in it would name them to
        anyone who tries ids (`UNKEYED`, a log without a master key, gives the plain one)."""
        return purpose.removesuffix("_lock") + ":" + self.ref(purpose, user_id)[:24]

    def all(self, purpose: RefPurpose, user_id: str | None) -> list[str]:
        """The ref, then the legacy digest when it differs: what to look for."""
        return list(dict.fromkeys((self.ref(purpose, user_id), legacy(user_id))))


UNKEYED = UserRefs(None)
"""The refs without a master key: the plain digests (see the module docstring)."""


def _context(name: str) -> bytes:
    return f"frontdesk-ref-key\x00{name}".encode()


def master_of(conn: Connection) -> str | None:
    """The master key id wrapping the ref key (`None`: no ref key was made yet)."""
    query = select(audit_ref_key.c.master_key_id).where(audit_ref_key.c.name == REF_KEY_NAME)
    found: str | None = conn.execute(query).scalar_one_or_none()
    return found


def _read(conn: Connection) -> tuple[str, str] | None:
    query = select(audit_ref_key.c.wrapped_key, audit_ref_key.c.master_key_id).where(
        audit_ref_key.c.name == REF_KEY_NAME
    )
    row = conn.execute(query).first()
    return None if row is None else (row[0], row[1])


def _unwrap(provider: KeyProvider, wrapped: str, master_key_id: str) -> bytes:
    if master_key_id != provider.key_id:
        raise AuditKeyError(
            f"the audit master key ({provider.key_id}) is not the one that wrapped this"
            f" database's ref key ({master_key_id}); set {MASTER_KEY_ENV} to that key"
            " (rotate with `frontdesk audit rotate-key`)"
        )
    return provider.unwrap(base64.b64decode(wrapped), _context(REF_KEY_NAME))


def read_refs(conn: Connection, provider: KeyProvider) -> UserRefs | None:
    """The refs under the stored ref key (`None`: none is stored yet; see `load_refs`)."""
    found = _read(conn)
    return None if found is None else UserRefs(_unwrap(provider, *found))


def load_refs(conn: Connection, provider: KeyProvider) -> UserRefs:
    """The refs under the database's ref key, made (and wrapped by `provider`) if there is
    none yet. Run in a write transaction: two processes making it at once keep one key.

    Raises:
        AuditKeyError: the ref key is wrapped by another master key.
    """
    found = _read(conn)
    if found is None:
        key = os.urandom(32)
        wrapped = base64.b64encode(provider.wrap(key, _context(REF_KEY_NAME))).decode("ascii")
        row = {
            "name": REF_KEY_NAME,
            "wrapped_key": wrapped,
            "master_key_id": provider.key_id,
            "version": 1,
            "created_at": datetime.now(UTC).isoformat(timespec="microseconds"),
        }
        dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        conn.execute(dialect_insert(audit_ref_key).on_conflict_do_nothing(), [row])
        found = _read(conn)
        assert found is not None
        if found[0] == wrapped:  # Ours was kept (another process's would be unwrapped).
            return UserRefs(key)
    return UserRefs(_unwrap(provider, *found))


def rewrap_ref_key(conn: Connection, old: KeyProvider, new: KeyProvider) -> bool:
    """Re-wrap the ref key of `old` with `new` (the refs do not change); whether it was.

    A ref key already under `new`, or none at all, is left as it is.
    """
    found = _read(conn)
    if found is None or found[1] == new.key_id:
        return False
    key = _unwrap(old, *found)
    wrapped = base64.b64encode(new.wrap(key, _context(REF_KEY_NAME))).decode("ascii")
    conn.execute(
        update(audit_ref_key)
        .where(audit_ref_key.c.name == REF_KEY_NAME)
        .values(
            wrapped_key=wrapped,
            master_key_id=new.key_id,
            version=audit_ref_key.c.version + 1,
        )
    )
    return True
