"""With DEBUG logging on, no API key and no raw user text reaches the logs (RELIABILITY D5)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pydantic import BaseModel
from structlog.testing import capture_logs

from frontdesk.errors import ProviderOverloaded
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator, TurnFailed
from tests.experts.providers.wire_server import ANTHROPIC_PATH, Reply, WireServer

pytestmark = pytest.mark.anyio

USER_TEXT = "my card 4111 1111 1111 1111 and secret phrase PURPLE-ELEPHANT-7"
KEY = "sk-ant-api03-THIS-IS-A-TEST-KEY-0123456789"


def _leaks(caplog: pytest.LogCaptureFixture, events: Sequence[Mapping[str, Any]]) -> list[str]:
    text = caplog.text + "\n".join(repr(e) for e in events)
    return [s for s in ("PURPLE-ELEPHANT-7", "4111 1111", KEY, KEY[-12:]) if s in text]


async def test_turns_that_succeed_and_fail_log_no_user_text(
    team: Any, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    async def broken(request: BaseModel, context: HandlerContext) -> Outcome:
        raise RuntimeError(f"handler saw {USER_TEXT}")

    class Ask(BaseModel):
        what: str

    ask = Category(name="ASK", description="Questions", request=Ask, handler=broken)
    team.route = lambda r: "ASK"
    team.extract = lambda r: {"request": {"what": USER_TEXT}}
    down = {"on": False}

    def model(request: ModelRequest) -> Any:
        if down["on"] and request.expert == "response":
            raise ProviderOverloaded(f"overloaded while answering {USER_TEXT}", status_code=529)
        return team(request)

    with capture_logs() as events:
        orch = Orchestrator([ask], model=FunctionModel(model), store=db_url)
        await orch.handle("c", USER_TEXT, client_message_id="m-1")
        await orch.handle("c", USER_TEXT, client_message_id="m-1")  # an idempotent replay
        down["on"] = True
        # After the handler acted, the reply falls back to a plain one (logged by class).
        await orch.handle("c", USER_TEXT + " once more")
        team.route = lambda r: "OTHER"  # No handler: the outage fails the turn.
        with pytest.raises(TurnFailed):
            await orch.handle("c", USER_TEXT + " again")
        await orch.aclose()
    assert _leaks(caplog, events) == []


async def test_a_rejected_key_is_not_logged(
    wire: WireServer, db_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    body = {"type": "error", "error": {"type": "authentication_error", "message": f"bad {KEY}"}}
    wire.script(ANTHROPIC_PATH, Reply(status=401, body=body))
    with capture_logs() as events:
        orch = Orchestrator(potato_categories(), model="anthropic:claude-test", store=db_url)
        with pytest.raises(TurnFailed):
            # Triage's 401 is an outage, not a content problem: the turn fails, typed.
            await orch.handle("c", USER_TEXT)
        await orch.aclose()
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 1
    assert _leaks(caplog, events) == []


async def test_a_quota_error_raises_an_ops_alert_and_a_safe_reply(team: Any, db_url: str) -> None:
    from frontdesk.errors import ProviderQuotaExhausted

    def broke(request: ModelRequest) -> Any:
        raise ProviderQuotaExhausted("insufficient_quota", status_code=429, model="openai:x")

    with capture_logs() as events:
        orch = Orchestrator(potato_categories(), model=FunctionModel(broke), store=db_url)
        with pytest.raises(TurnFailed) as failed:
            await orch.handle("c", "hello")
        await orch.aclose()
    alerts = [e for e in events if e["event"] == "alert.provider_quota_exhausted"]
    assert alerts == [
        {
            "event": "alert.provider_quota_exhausted",
            "model": "openai:x",
            "stage": "triage",
            "log_level": "error",
        }
    ]
    assert "try again" in failed.value.safe_reply
