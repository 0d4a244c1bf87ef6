"""Audit write failures are never silent: a typed error, or a local spool written later."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from structlog.testing import capture_logs

from frontdesk.audit.events import AuditEvent
from frontdesk.audit.spool import Spool
from frontdesk.audit.store import AuditLog
from frontdesk.errors import AuditWriteError

pytestmark = pytest.mark.anyio

MakeTurn = Callable[..., list[AuditEvent]]


@pytest.fixture
async def down_engine() -> AsyncIterator[AsyncEngine]:
    """An engine whose database is unreachable (nothing listens on port 1)."""
    engine = create_async_engine("postgresql+asyncpg://postgres@127.0.0.1:1/none")
    yield engine
    await engine.dispose()


async def test_raise_mode_fails_the_turn_with_a_typed_error(
    down_engine: AsyncEngine, conv_id: str, make_turn: MakeTurn, tmp_path: Path
) -> None:
    log = AuditLog(down_engine, owns_engine=False, on_failure="raise", spool=None)
    with pytest.raises(AuditWriteError, match="on_failure='spool'") as info:
        await log.append(conv_id, make_turn("t1"))
    assert info.value.conversation_id == conv_id and info.value.events == 8


async def test_spooled_batches_are_written_first_on_the_next_append(
    audit_log: AuditLog,
    down_engine: AsyncEngine,
    conv_id: str,
    make_turn: MakeTurn,
    tmp_path: Path,
) -> None:
    spool_dir = tmp_path / "spool"
    down = AuditLog(down_engine, owns_engine=False, on_failure="spool", spool=Spool(spool_dir))
    with capture_logs() as logs:
        await down.append(conv_id, make_turn("t1"))
        await down.append(conv_id, make_turn("t2"))
    assert down.spooled() == 2
    assert [e["event"] for e in logs] == ["audit_write_spooled"] * 2
    assert logs[0]["log_level"] == "warning" and logs[0]["events"] == 8

    up = AuditLog(audit_log.engine, owns_engine=False, on_failure="spool", spool=Spool(spool_dir))
    await up.append(conv_id, make_turn("t3"))
    rows = await audit_log.events(conv_id)
    assert [r.turn_id for r in rows] == ["t1"] * 8 + ["t2"] * 8 + ["t3"] * 8
    assert up.spooled() == 0 and not (spool_dir / "audit-spool.jsonl").exists()
    assert (await audit_log.verify(conv_id)).ok
    # The spooled events kept their own timestamps and ids.
    originals = make_turn("t1")
    assert rows[0].created_at.startswith(originals[0].created_at.isoformat()[:23])


async def test_flush_is_idempotent_for_batches_already_stored(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn, tmp_path: Path
) -> None:
    # A commit whose acknowledgement was lost: stored, and also spooled.
    batch = make_turn("t1")
    await audit_log.append(conv_id, batch)
    spool = Spool(tmp_path / "spool")
    await spool.add(conv_id, batch)
    await spool.add(conv_id, make_turn("t2"))
    log = AuditLog(audit_log.engine, owns_engine=False, on_failure="spool", spool=spool)
    assert await log.flush_spool() == 2
    rows = await audit_log.events(conv_id)
    assert [r.turn_id for r in rows] == ["t1"] * 8 + ["t2"] * 8
    assert (await audit_log.verify(conv_id)).ok


async def test_flush_keeps_the_spool_while_the_database_is_down(
    down_engine: AsyncEngine, conv_id: str, make_turn: MakeTurn, tmp_path: Path
) -> None:
    log = AuditLog(
        down_engine, owns_engine=False, on_failure="spool", spool=Spool(tmp_path / "spool")
    )
    await log.append(conv_id, make_turn("t1"))
    with pytest.raises(AuditWriteError, match="1 batches remain"):
        await log.flush_spool()
    await log.append(conv_id, make_turn("t2"))  # the drain fails first, so this is spooled
    assert log.spooled() == 2
