"""`AuditLog.append(connection=...)`: a batch inside the caller's transaction, on both backends."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from frontdesk.audit.events import AuditEvent
from frontdesk.audit.store import AuditLog
from frontdesk.db import create_engine
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
