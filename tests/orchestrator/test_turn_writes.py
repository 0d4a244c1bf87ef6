"""How a turn writes: reply, audit batch and lease release together, or apart when they must."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from frontdesk.audit.store import AuditLog
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.orchestrator import Orchestrator

pytestmark = pytest.mark.anyio


async def _kinds(log: AuditLog, conversation: str) -> list[str]:
    return [e.kind for e in await log.events(conversation)]


async def test_the_reply_and_its_audit_batch_are_one_transaction(
    team: Any, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    await orch.open()
    assert orch.audit_log is not None
    joined: list[bool] = []
    append, append_sync = orch.audit_log.append, orch.audit_log.append_sync

    async def spy(conversation_id: str, events: Any, *, connection: Any = None, **kw: Any) -> None:
        joined.append(connection is not None)
        await append(conversation_id, events, connection=connection, **kw)

    def sync_spy(connection: Any, conversation_id: str, events: Any, **kw: Any) -> list[str]:
        joined.append(connection is not None)
        return append_sync(connection, conversation_id, events, **kw)

    monkeypatch.setattr(orch.audit_log, "append", spy)
    monkeypatch.setattr(orch.audit_log, "append_sync", sync_spy)
    reply = await orch.handle("c", "hello", client_message_id="m-1")
    again = await orch.handle("c", "hello", client_message_id="m-1")
    transcript = await orch.transcript("c")
    kinds = await _kinds(orch.audit_log, "c")
    await orch.aclose()
    assert joined == [True]
    assert again.replayed and again.message_id == reply.message_id
    assert [m.id for m in transcript] == [reply.user_message_id, reply.message_id]
    assert kinds[0] == "turn_started" and kinds[-1] == "reply"


async def test_when_the_joint_write_fails_the_reply_and_audit_are_written_apart(
    team: Any, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    await orch.open()
    assert orch.audit_log is not None
    append = orch.audit_log.append

    async def refuses_to_join(
        conversation_id: str, events: Any, *, connection: Any = None, **kw: Any
    ) -> None:
        if connection is not None:
            raise RuntimeError("cannot join")
        await append(conversation_id, events, **kw)

    def refuses_to_join_sync(connection: Any, conversation_id: str, events: Any, **kw: Any) -> None:
        raise RuntimeError("cannot join")

    monkeypatch.setattr(orch.audit_log, "append", refuses_to_join)
    monkeypatch.setattr(orch.audit_log, "append_sync", refuses_to_join_sync)
    reply = await orch.handle("c", "hello")
    second = await orch.handle("c", "and again")  # The lease was given back.
    transcript = await orch.transcript("c")
    kinds = await _kinds(orch.audit_log, "c")
    await orch.aclose()
    assert [m.content for m in transcript] == ["hello", reply.text, "and again", second.text]
    assert kinds.count("reply") == 2 and kinds.count("turn_started") == 2


async def test_an_audit_log_in_another_database_gets_its_own_transaction(
    team: Any, db_url: str, tmp_path: Path
) -> None:
    audit = await AuditLog.open(f"sqlite:///{tmp_path / 'audit.db'}")
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url, audit=audit)
    reply = await orch.handle("c", "hello")
    follow = await orch.handle("c", "more")
    transcript = await orch.transcript("c")
    kinds = await _kinds(audit, "c")
    await orch.aclose()
    await audit.aclose()
    assert [m.content for m in transcript] == ["hello", reply.text, "more", follow.text]
    assert kinds.count("reply") == 2
