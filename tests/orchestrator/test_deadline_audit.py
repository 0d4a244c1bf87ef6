"""An attempt cut off by the turn deadline is still in the audit log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator, TurnFailed

pytestmark = pytest.mark.anyio


@pytest.fixture
async def hanging_server() -> AsyncIterator[str]:
    """A server that reads each request and never answers (a provider that hangs)."""

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await reader.read(65536):
                pass
        finally:
            writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def _cut_off_turn(orch: Orchestrator) -> list[Any]:
    with pytest.raises(TurnFailed) as failed:
        await orch.handle("c", "a bag of purple potatoes", client_message_id="m-1")
    assert failed.value.stage == "deadline"
    log = orch.audit_log
    assert log is not None
    events = await log.events("c")
    assert (await log.verify("c")).ok
    await orch.aclose()
    return events


async def test_a_double_cut_off_by_the_deadline_leaves_its_attempt_row(
    team: Any, db_url: str
) -> None:
    async def slow_triage(request: ModelRequest) -> Any:
        if request.expert == "triage":
            await asyncio.sleep(3600)
        return team(request)

    orch = Orchestrator(
        potato_categories(), model=FunctionModel(slow_triage), store=db_url, turn_deadline=0.3
    )
    events = await _cut_off_turn(orch)
    assert [e.kind for e in events] == ["turn_started", "model_attempt", "turn_failed"]
    attempt = events[1].payload
    assert attempt["expert"] == "triage" and attempt["attempt"] == 1
    assert attempt["error"].startswith("CancelledError")  # the double reports it itself
    assert attempt["latency_ms"] >= 250
    assert attempt["messages"] == [{"role": "user", "content": "a bag of purple potatoes"}]


async def test_a_real_sdk_attempt_cut_off_by_the_deadline_is_audited(
    hanging_server: str,
    db_url: str,
    monkeypatch: pytest.MonkeyPatch,
    allow_model_requests: None,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", hanging_server)
    orch = Orchestrator(
        potato_categories(), model="anthropic:claude-test", store=db_url, turn_deadline=0.5
    )
    events = await _cut_off_turn(orch)
    attempts = [e.payload for e in events if e.kind == "model_attempt"]
    assert len(attempts) == 1
    assert attempts[0]["model"] == "anthropic:claude-test" and attempts[0]["attempt"] == 1
    # The adapter reports the cancelled attempt itself; the recorder adds no second row.
    assert attempts[0]["error"].startswith("ModelError: the attempt was cancelled: the caller")
    assert attempts[0]["messages"] == [{"role": "user", "content": "a bag of purple potatoes"}]
    assert events[-1].kind == "turn_failed" and events[-1].payload["stage"] == "deadline"
