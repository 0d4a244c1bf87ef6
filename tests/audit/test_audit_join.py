"""`AuditLog.append(connection=...)`: a batch inside the caller's transaction, on both backends."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from frontdesk.audit.events import AuditEvent
from frontdesk.audit.store import AuditLog
from frontdesk.db import create_engine, run_write
from frontdesk.errors import AuditConfigError

pytestmark = pytest.mark.anyio

MakeTurn = Callable[..., list[AuditEvent]]


async def test_a_batch_in_the_callers_transaction_commits_and_rolls_back_with_it(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    assert audit_log.joinable(audit_log.engine)
    async with audit_log.engine.begin() as conn:
        await audit_log.append(conv_id, make_turn("t1"), connection=conn)
    with pytest.raises(RuntimeError):
        async with audit_log.engine.begin() as conn:
            await audit_log.append(conv_id, make_turn("t2"), connection=conn)
            raise RuntimeError("the turn's own write failed")
    await audit_log.append(conv_id, make_turn("t3"))
    rows = await audit_log.events(conv_id)
    assert [r.turn_id for r in rows] == ["t1"] * 8 + ["t3"] * 8
    assert [r.seq for r in rows] == list(range(1, 17))
    assert (await audit_log.verify(conv_id)).ok


async def test_a_connection_of_another_engine_is_refused(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn, tmp_path: object
) -> None:
    other = create_engine(f"sqlite:///{tmp_path}/other.db")
    try:
        assert not audit_log.joinable(other)
        async with other.connect() as conn:
            with pytest.raises(AuditConfigError, match="without a connection"):
                await audit_log.append(conv_id, make_turn("t1"), connection=conn)
    finally:
        await other.dispose()
    assert await audit_log.events(conv_id) == []


async def test_a_foreign_connection_is_refused_after_the_logs_own_was_accepted(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn, tmp_path: object
) -> None:
    """`append_sync` remembers the engine of the connection it last accepted (every turn's
    finish asks): a connection of another engine is still refused after it."""
    first = make_turn("t1")
    written = await run_write(
        audit_log.engine, lambda conn: audit_log.append_sync(conn, conv_id, first)
    )
    audit_log.committed(first, written, conv_id)
    other = create_engine(f"sqlite:///{tmp_path}/other.db")
    try:
        with pytest.raises(AuditConfigError, match="without a connection"):
            await run_write(
                other, lambda conn: audit_log.append_sync(conn, conv_id, make_turn("t2"))
            )
    finally:
        await other.dispose()
    assert [r.turn_id for r in await audit_log.events(conv_id)] == ["t1"] * 8


async def test_a_batch_chains_after_another_logs_batch_the_first_log_never_saw(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn, tmp_path: object
) -> None:
    """On SQLite a joined batch chains from the head its log saw committed and moves it only
    if it is still there; another process's batch (a second log on the same file) moved it
    meanwhile: the batch reads the head and chains after that batch instead."""
    engine_url = audit_log.engine.url
    postgres = engine_url.get_backend_name() == "postgresql"
    url = (
        engine_url.render_as_string(hide_password=False)
        if postgres
        else f"sqlite:///{tmp_path}/audit.db"
    )

    async def joined(log: AuditLog, turn_id: str) -> None:
        events = make_turn(turn_id)
        written = await run_write(log.engine, lambda conn: log.append_sync(conn, conv_id, events))
        log.committed(events, written, conv_id)

    await joined(audit_log, "t1")
    await joined(audit_log, "t2")  # Chained from the head this log saw committed.
    other = await AuditLog.open(url)
    try:
        await joined(other, "t3")
    finally:
        await other.aclose()
    await joined(audit_log, "t4")  # Its known head is stale now.
    rows = await audit_log.events(conv_id)
    assert [r.turn_id for r in rows] == ["t1"] * 8 + ["t2"] * 8 + ["t3"] * 8 + ["t4"] * 8
    assert [r.seq for r in rows] == list(range(1, 33))
    assert (await audit_log.verify(conv_id)).ok
