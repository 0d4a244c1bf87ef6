"""Crypto-shredding steps on the audit tables: a user's keys, a period's keys, rows in clear."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from frontdesk.audit import erasure
from frontdesk.audit.crypto import ERASED
from frontdesk.audit.events import AuditEvent
from frontdesk.audit.store import AuditLog
from frontdesk.db import run_write

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def keyed_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AuditLog]:
    """An audit log with a master key (payloads encrypted per user), on each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'audit.db'}"
    else:
        url = str(request.getfixturevalue("fresh_pg_url"))
    log = await AuditLog.open(url, master_key=os.urandom(32))
    try:
        yield log
    finally:
        await log.aclose()


def _event(text: str) -> AuditEvent:
    return AuditEvent(kind="turn_started", turn_id="t1", payload={"text": text})


async def test_a_users_keys_are_shredded_once(keyed_log: AuditLog) -> None:
    user, conv = f"u-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    await keyed_log.append(conv, [_event("my card ends 4242")], user_id=user)
    clear_conv = f"c-{uuid.uuid4().hex[:8]}"
    await keyed_log.append(clear_conv, [_event("public")], in_clear=True)

    engine = keyed_log.engine
    assert await run_write(engine, lambda c: erasure.rows_in_clear(c, [])) == 0
    # Encrypted rows are envelopes ({"clear": ..., "enc": ...}); a row in clear is plain.
    assert await run_write(engine, lambda c: erasure.rows_in_clear(c, [conv])) == 0
    assert await run_write(engine, lambda c: erasure.rows_in_clear(c, [clear_conv])) == 1
    assert await run_write(engine, lambda c: erasure.rows_in_clear(c, [conv, clear_conv])) == 1
    assert await run_write(engine, lambda c: erasure.shred_user(c, user, keyed_log.refs)) == 1
    assert await run_write(engine, lambda c: erasure.shred_user(c, user, keyed_log.refs)) == 0
    if keyed_log.keys is not None:
        keyed_log.keys.forget()
    [stored] = await keyed_log.events(conv)
    assert stored.payload["text"] == ERASED


async def test_a_periods_keys_are_counted_in_a_dry_run_then_shredded(keyed_log: AuditLog) -> None:
    user, conv = f"u-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    await keyed_log.append(conv, [_event("hello")], user_id=user)
    engine = keyed_log.engine
    assert await run_write(engine, lambda c: erasure.shred_before(c, "0001-01", dry_run=True)) == 0
    assert await run_write(engine, lambda c: erasure.shred_before(c, "9999-12", dry_run=True)) == 1
    assert await run_write(engine, lambda c: erasure.shred_before(c, "9999-12", dry_run=True)) == 1
    assert await run_write(engine, lambda c: erasure.shred_before(c, "9999-12")) == 1
    assert await run_write(engine, lambda c: erasure.shred_before(c, "9999-12")) == 0
