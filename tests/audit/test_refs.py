"""The ref key: users' keyed digests, made once per database, wrapped by the master key."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from frontdesk.audit import crypto
from frontdesk.audit.crypto import MasterKey
from frontdesk.audit.refs import UNKEYED, UserRefs, legacy, rewrap_ref_key
from frontdesk.audit.store import AuditLog
from frontdesk.db import run_write
from frontdesk.errors import AuditKeyError

pytestmark = pytest.mark.anyio
USER = "cust-00424242"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'audit.db'}"
        return
    yield str(request.getfixturevalue("fresh_pg_url"))


class Kms:
    """A provider as a KMS is: wrap and unwrap only, the master key never leaves it."""

    def __init__(self, inner: MasterKey, key_id: str = "kms:audit/1") -> None:
        self._inner, self._id = inner, key_id

    @property
    def key_id(self) -> str:
        return self._id

    def wrap(self, data_key: bytes, context: bytes) -> bytes:
        return self._inner.wrap(data_key, context)

    def unwrap(self, wrapped: bytes, context: bytes) -> bytes:
        return self._inner.unwrap(wrapped, context)


def test_refs_are_hmacs_per_purpose_and_the_plain_digest_only_without_a_key() -> None:
    plain = hashlib.sha256(USER.encode()).hexdigest()[:32]
    assert legacy(USER) == plain == crypto.user_ref(USER) == UNKEYED.ref("erased_owner", USER)
    assert not UNKEYED.keyed and UNKEYED.all("data_key", USER) == [plain]
    refs = UserRefs(b"k" * 32)
    made = {p: refs.ref(p, USER) for p in ("data_key", "user_chain", "erased_owner")}
    assert len(set(made.values())) == 3 and plain not in made.values()
    assert all(len(r) == 32 and int(r, 16) >= 0 for r in made.values())
    assert refs.all("data_key", USER) == [made["data_key"], plain]  # What erasure looks for.
    assert refs.ref("data_key", None) == refs.ref("data_key", "")  # Single-user mode.
    assert UserRefs(b"j" * 32).ref("data_key", USER) != made["data_key"]


async def test_one_ref_key_per_database_made_on_the_first_open_with_a_key(url: str) -> None:
    key = MasterKey.generate()
    async with await AuditLog.open(url) as clear:  # No key: nothing made, plain digests.
        assert clear.refs is UNKEYED
        count = "SELECT count(*) FROM audit_ref_key"
        async with clear.engine.connect() as conn:
            assert (await conn.execute(text(count))).scalar_one() == 0
    logs = await asyncio.gather(*(AuditLog.open(url, master_key=key) for _ in range(5)))
    try:  # Five first opens at once (a race to make it) agree on one key.
        assert len({log.refs.ref("erased_owner", USER) for log in logs}) == 1
        async with logs[0].engine.connect() as conn:
            row = (await conn.execute(text("SELECT * FROM audit_ref_key"))).mappings().one()
        assert row["master_key_id"] == key.key_id and row["version"] == 1
        assert len(row["wrapped_key"]) > 40  # Wrapped: 12-byte nonce, 32 bytes, 16-byte tag.
    finally:
        for log in logs:
            await log.aclose()
    with pytest.raises(AuditKeyError, match="not the one that wrapped"):
        await AuditLog.open(url, master_key=MasterKey.generate())  # No data key, still.


async def test_a_rotated_master_key_keeps_the_refs_and_a_kms_needs_only_wrap(url: str) -> None:
    old, new = Kms(MasterKey.generate()), Kms(MasterKey.generate(), "kms:audit/2")
    async with await AuditLog.open(url, master_key=old) as log:
        before = log.refs.ref("user_chain", USER)
        engine = log.engine
        assert await run_write(engine, lambda c: rewrap_ref_key(c, old, new)) is True
        assert await run_write(engine, lambda c: rewrap_ref_key(c, old, new)) is False
    with pytest.raises(AuditKeyError, match="not the one that wrapped"):
        await AuditLog.open(url, master_key=old)
    async with await AuditLog.open(url, master_key=new) as log:
        assert log.refs.ref("user_chain", USER) == before
