"""FallbackModel: another model once the primary's retries are spent."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from frontdesk.errors import ConfigError, ModelHTTPError, ProviderOverloaded
from frontdesk.experts.providers import (
    AnthropicModel,
    AttemptEvent,
    FallbackModel,
    FunctionModel,
    ModelRequest,
    OpenAIModel,
    ScriptedModel,
    observe_attempts,
)
from tests.experts.providers.conftest import FakeClock
from tests.experts.providers.wire_server import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    Reply,
    WireServer,
    anthropic_error,
    openai_completion,
)

pytestmark = pytest.mark.anyio

REQ = ModelRequest(expert="response", system="s", messages=[{"role": "user", "content": "hi"}])


def failing(error: Exception) -> Callable[[ModelRequest], str]:
    def fn(request: ModelRequest) -> str:
        raise error

    return fn


async def test_fallback_used_once_on_outage() -> None:
    backup = ScriptedModel(["from backup"], name="backup")
    model = FallbackModel(FunctionModel(failing(ProviderOverloaded("x", status_code=529))), backup)
    response = await model.request(REQ)
    assert response.output == "from backup" and response.model == "backup"
    backup.assert_complete()


async def test_other_errors_do_not_fall_back() -> None:
    backup = ScriptedModel([], name="backup")
    model = FallbackModel(FunctionModel(failing(ModelHTTPError("bad", status_code=400))), backup)
    with pytest.raises(ModelHTTPError):
        await model.request(REQ)
    assert backup.calls == []


async def test_last_error_surfaces_when_all_fail() -> None:
    model = FallbackModel(
        FunctionModel(failing(ProviderOverloaded("a", status_code=529))),
        FunctionModel(failing(ProviderOverloaded("b", status_code=503))),
    )
    with pytest.raises(ProviderOverloaded, match="b"):
        await model.request(REQ)


def test_needs_a_fallback() -> None:
    with pytest.raises(ConfigError):
        FallbackModel(FunctionModel(lambda r: "x"))


async def test_anthropic_outage_falls_back_to_openai(wire: WireServer, clock: FakeClock) -> None:
    wire.script(ANTHROPIC_PATH, *[Reply(529, anthropic_error("overloaded_error"))] * 4)
    wire.script(OPENAI_PATH, Reply(200, openai_completion("from openai")))
    primary = AnthropicModel(
        "claude-test",
        api_key="sk-ant-x-12345678",
        base_url=wire.url,
        sleep=clock.sleep,
        clock=clock.now,
    )
    backup = OpenAIModel("gpt-test", base_url=f"{wire.url}/v1", sleep=clock.sleep, clock=clock.now)
    events: list[AttemptEvent] = []
    try:
        with observe_attempts(events.append):
            response = await FallbackModel(primary, backup).request(REQ)
    finally:
        await primary.aclose()
        await backup.aclose()
    assert response.output == "from openai" and response.model.startswith("openai:")
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 4 and len(wire.requests_to(OPENAI_PATH)) == 1
    assert [e.model.split(":")[0] for e in events] == ["anthropic"] * 4 + ["openai"]
