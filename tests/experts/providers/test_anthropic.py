"""AnthropicModel through the real SDK against the local wire server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Literal

import pytest
import structlog
from pydantic import BaseModel

from frontdesk.errors import (
    ModelConnectionError,
    ModelHTTPError,
    ModelRequestsBlocked,
    OutputValidationError,
    ProviderOverloaded,
    ProviderQuotaExhausted,
    RateLimited,
    Refusal,
    TruncatedOutput,
)
from frontdesk.experts.providers import AttemptEvent, ModelRequest, ModelSettings, observe_attempts
from frontdesk.experts.providers.anthropic import INSTRUCTION_LABEL, AnthropicModel
from tests.experts.providers.conftest import FakeClock
from tests.experts.providers.wire_server import (
    ANTHROPIC_PATH,
    Reply,
    WireServer,
    anthropic_error,
    anthropic_message,
    anthropic_text,
    anthropic_tool,
)

pytestmark = pytest.mark.anyio

Maker = Callable[..., AnthropicModel]
KEY = "sk-ant-test-0123456789abcdefSECRET"


class Order(BaseModel):
    variety: Literal["purple", "idaho"]
    bags: int


@pytest.fixture
async def make(clock: FakeClock) -> AsyncIterator[Callable[..., AnthropicModel]]:
    """Builds models on the wire server; closes their connections after the test."""
    made: list[AnthropicModel] = []

    def build(wire: WireServer, base_url: str | None = None) -> AnthropicModel:
        model = AnthropicModel(
            "claude-test",
            api_key=KEY,
            base_url=base_url or wire.url,
            sleep=clock.sleep,
            clock=clock.now,
        )
        made.append(model)
        return model

    yield build
    for model in made:
        await model.aclose()


def ask(output_type: type[BaseModel] | None = None, **kwargs: object) -> ModelRequest:
    messages = kwargs.pop("messages", [{"role": "user", "content": "a bag of purple please"}])
    return ModelRequest(
        expert="request",
        system="You extract orders.",
        messages=messages,  # type: ignore[arg-type]
        output_type=output_type,
        **kwargs,  # type: ignore[arg-type]
    )


async def test_text_body_cache_markers_instruction_and_usage(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    usage = {
        "input_tokens": 11,
        "output_tokens": 7,
        "cache_read_input_tokens": 300,
        "cache_creation_input_tokens": 40,
    }
    wire.script(
        ANTHROPIC_PATH,
        Reply(200, anthropic_text("Please confirm.", usage=usage), {"request-id": "req_1"}),
    )
    request = ModelRequest(
        expert="response",
        system="You are the shop.",
        messages=[
            {"role": "user", "content": "Summary: Priya, order 88213."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": "a bag of purple please"},
            {"role": "assistant", "content": "Ask the user to confirm one bag of purple"},
        ],
        cache_prefix_messages=2,
        settings=ModelSettings(max_tokens=200, temperature=0.2, timeout=5),
    )
    response = await make(wire).request(request)

    assert response.output == "Please confirm."
    assert response.usage.input_tokens == 11
    assert response.usage.output_tokens == 7
    assert response.usage.cache_read_tokens == 300
    assert response.usage.cache_write_tokens == 40
    assert response.provider_request_id == "req_1"
    assert response.model == "anthropic:claude-test"
    assert response.attempts == 1
    [sent] = wire.requests_to(ANTHROPIC_PATH)
    assert any(KEY in value for value in sent.headers.values())  # the key is sent
    body = sent.body
    assert body["system"] == [
        {"type": "text", "text": "You are the shop.", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["max_tokens"] == 200 and body["temperature"] == 0.2
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [
        {"type": "text", "text": "Noted.", "cache_control": {"type": "ephemeral"}}
    ]
    assert "cache_control" not in body["messages"][0]["content"][0]
    last = body["messages"][2]["content"]
    assert last[0] == {"type": "text", "text": "a bag of purple please"}
    assert last[1]["text"] == f"{INSTRUCTION_LABEL}\nAsk the user to confirm one bag of purple"
    assert "tools" not in body


async def test_structured_output_by_forced_tool(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    wire.script(
        ANTHROPIC_PATH, Reply(200, anthropic_tool("Order", {"variety": "purple", "bags": 1}))
    )
    response = await make(wire).request(ask(Order))
    assert response.output == Order(variety="purple", bags=1)
    [sent] = wire.requests_to(ANTHROPIC_PATH)
    assert sent.body["tool_choice"] == {"type": "tool", "name": "Order"}
    [tool] = sent.body["tools"]
    assert tool["name"] == "Order"
    assert tool["input_schema"] == Order.model_json_schema()


async def test_529_then_success_two_requests_two_events(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(529, anthropic_error("overloaded_error"), {"request-id": "req_a"}),
        Reply(200, anthropic_text("ok"), {"request-id": "req_b"}),
    )
    events: list[AttemptEvent] = []
    with observe_attempts(events.append):
        response = await make(wire).request(ask())
    assert response.output == "ok" and response.attempts == 2
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 2
    assert [(e.attempt, e.status_code, e.will_retry) for e in events] == [
        (1, 529, True),
        (2, 200, False),
    ]
    assert [e.provider_request_id for e in events] == ["req_a", "req_b"]
    assert events[0].error is not None and events[0].error.startswith("ProviderOverloaded")
    assert events[0].request_body == wire.requests_to(ANTHROPIC_PATH)[0].body
    assert len(clock.sleeps) == 1 and 0 < clock.sleeps[0] <= 0.5  # jittered first backoff


async def test_429_retry_after_is_honoured(wire: WireServer, clock: FakeClock, make: Maker) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(429, anthropic_error("rate_limit_error"), {"retry-after": "2"}),
        Reply(200, anthropic_text("ok")),
    )
    response = await make(wire).request(ask())
    assert response.output == "ok"
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 2
    assert clock.sleeps == [2.0]


async def test_429_retry_after_ms_is_honoured(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(429, anthropic_error("rate_limit_error"), {"retry-after-ms": "1500"}),
        Reply(200, anthropic_text("ok")),
    )
    await make(wire).request(ask())
    assert clock.sleeps == [1.5]


async def test_429_retry_after_beyond_cap_gives_up_at_once(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(429, anthropic_error("rate_limit_error"), {"retry-after": "120"}),
    )
    with pytest.raises(RateLimited) as info:
        await make(wire).request(ask())
    assert info.value.retry_after == 120
    assert info.value.attempts == 1
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 1
    assert clock.sleeps == []


@pytest.mark.parametrize("status", [503, 529])
async def test_persistent_overload_is_four_requests(
    wire: WireServer, clock: FakeClock, make: Maker, status: int
) -> None:
    wire.script(ANTHROPIC_PATH, *[Reply(status, anthropic_error("overloaded_error"))] * 6)
    with pytest.raises(ProviderOverloaded) as info:
        await make(wire).request(ask())
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 4
    assert info.value.attempts == 4 and info.value.status_code == status
    assert len(clock.sleeps) == 3
    assert clock.sleeps == sorted(clock.sleeps) or max(clock.sleeps) <= 8


@pytest.mark.parametrize("status", [400, 403, 404, 422])
async def test_client_errors_are_not_retried(
    wire: WireServer, clock: FakeClock, make: Maker, status: int
) -> None:
    wire.script(ANTHROPIC_PATH, Reply(status, anthropic_error("invalid_request_error", "bad")))
    with pytest.raises(ModelHTTPError) as info:
        await make(wire).request(ask())
    assert type(info.value) is ModelHTTPError and info.value.status_code == status
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 1


async def test_401_is_one_request_and_never_shows_the_key(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    echoed = f"invalid x-api-key {KEY[:14]}...{KEY[-10:]} ({KEY})"
    wire.script(ANTHROPIC_PATH, Reply(401, anthropic_error("authentication_error", echoed)))
    events: list[AttemptEvent] = []
    with structlog.testing.capture_logs() as logs, observe_attempts(events.append):
        with pytest.raises(ModelHTTPError) as info:
            await make(wire).request(ask())
    assert info.value.status_code == 401
    assert "ANTHROPIC_API_KEY" in str(info.value)
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 1
    for text in (str(info.value), repr(info.value.body), repr(logs), repr(events)):
        assert KEY not in text
        assert KEY[-10:] not in text


async def test_quota_429_is_not_retried(wire: WireServer, clock: FakeClock, make: Maker) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(
            429,
            {
                "type": "error",
                "error": {
                    "type": "rate_limit_error",
                    "message": "enforced_spend_limit_reached: monthly spend limit",
                    "details": {"error_code": "enforced_spend_limit_reached"},
                },
            },
        ),
    )
    with pytest.raises(ProviderQuotaExhausted):
        await make(wire).request(ask())
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 1


async def test_should_retry_false_on_503_is_obeyed(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    wire.script(
        ANTHROPIC_PATH, Reply(503, anthropic_error("api_error"), {"x-should-retry": "false"})
    )
    with pytest.raises(ProviderOverloaded):
        await make(wire).request(ask())
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 1


async def test_should_retry_true_on_409_is_obeyed(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(409, anthropic_error("conflict"), {"x-should-retry": "true"}),
        Reply(200, anthropic_text("ok")),
    )
    assert (await make(wire).request(ask())).output == "ok"
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 2


async def test_error_event_inside_a_200_is_retried(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(200, anthropic_error("overloaded_error")),
        Reply(200, anthropic_text("ok")),
    )
    assert (await make(wire).request(ask())).output == "ok"
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 2


async def test_malformed_output_is_asked_again_with_the_error(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(200, anthropic_tool("Order", {"variety": "sweet", "bags": 1})),
        Reply(200, anthropic_tool("Order", {"variety": "idaho", "bags": 2})),
    )
    response = await make(wire).request(ask(Order))
    assert response.output == Order(variety="idaho", bags=2)
    assert response.attempts == 2
    first, second = wire.requests_to(ANTHROPIC_PATH)
    assert len(second.body["messages"]) == len(first.body["messages"]) + 2
    bad_answer, error_turn = second.body["messages"][-2:]
    assert bad_answer["role"] == "assistant"
    assert bad_answer["content"][0]["input"] == {"variety": "sweet", "bags": 1}
    result = error_turn["content"][0]
    assert result["type"] == "tool_result" and result["is_error"] is True
    assert "variety" in result["content"] and "purple" in result["content"]


@pytest.mark.parametrize(
    "bad",
    [
        anthropic_text("I think purple"),  # no tool block
        anthropic_message([], stop_reason="end_turn"),  # empty content
        anthropic_tool("Order", {"variety": "purple"}),  # missing field
        anthropic_tool("Order", "{not json"),  # invalid JSON in tool input
        anthropic_message([{"type": "text", "text": "x"}], stop_reason="foo"),  # odd stop
    ],
)
async def test_invalid_twice_is_output_validation_error(
    wire: WireServer, clock: FakeClock, make: Maker, bad: dict[str, object]
) -> None:
    wire.script(ANTHROPIC_PATH, Reply(200, bad), Reply(200, bad))
    with pytest.raises(OutputValidationError) as info:
        await make(wire).request(ask(Order))
    assert info.value.attempts == 2
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 2


async def test_max_tokens_stop_is_truncated_output_after_one_larger_try(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    cut = Reply(200, anthropic_tool("Order", {"variety": "pur"}, stop_reason="max_tokens"))
    wire.script(ANTHROPIC_PATH, cut, cut)
    with pytest.raises(TruncatedOutput):
        await make(wire).request(ask(Order))
    sent = [r.body["max_tokens"] for r in wire.requests_to(ANTHROPIC_PATH)]
    assert sent == [1024, 2048]


async def test_max_tokens_stop_then_room_to_finish_succeeds(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(200, anthropic_tool("Order", {"variety": "pur"}, stop_reason="max_tokens")),
        Reply(200, anthropic_tool("Order", {"variety": "purple", "bags": 2})),
    )
    response = await make(wire).request(ask(Order))
    assert response.output == Order(variety="purple", bags=2)
    assert response.attempts == 2


async def test_refusal(wire: WireServer, clock: FakeClock, make: Maker) -> None:
    wire.script(ANTHROPIC_PATH, Reply(200, anthropic_text("", stop_reason="refusal")))
    with pytest.raises(Refusal):
        await make(wire).request(ask())
    assert len(wire.requests_to(ANTHROPIC_PATH)) == 1


async def test_connection_refused(
    wire: WireServer, clock: FakeClock, make: Maker, closed_port_url: str
) -> None:
    events: list[AttemptEvent] = []
    with observe_attempts(events.append), pytest.raises(ModelConnectionError) as info:
        await make(wire, base_url=closed_port_url).request(ask())
    assert closed_port_url.removeprefix("http://") in str(info.value)
    assert info.value.attempts == 4 and len(events) == 4
    assert isinstance(info.value.__cause__, Exception)
    assert not type(info.value.__cause__).__module__.startswith("experts")


async def test_blocked_without_the_fixture_makes_no_request(
    _wire_server: WireServer, clock: FakeClock, make: Maker
) -> None:
    _wire_server.reset()
    model = make(_wire_server)
    with pytest.raises(ModelRequestsBlocked):
        await model.request(ask())
    assert _wire_server.received == []


async def test_explicit_timeout_and_no_sdk_retries(
    wire: WireServer, clock: FakeClock, make: Maker
) -> None:
    model = make(wire)
    assert model._client.max_retries == 0
    assert model._client.timeout == 60.0
