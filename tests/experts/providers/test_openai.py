"""OpenAIModel through the real SDK against the local wire server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Literal

import pytest
import structlog
from pydantic import BaseModel

from frontdesk.errors import (
    MissingAPIKey,
    ModelConnectionError,
    ModelHTTPError,
    OutputValidationError,
    ProviderOverloaded,
    ProviderQuotaExhausted,
    RateLimited,
    Refusal,
    TruncatedOutput,
)
from frontdesk.experts.providers import AttemptEvent, ModelRequest, observe_attempts
from frontdesk.experts.providers.openai import PLACEHOLDER_KEY, OpenAIModel
from frontdesk.labels import INSTRUCTION_LABEL
from tests.experts.providers.conftest import FakeClock
from tests.experts.providers.wire_server import (
    OPENAI_PATH,
    Reply,
    WireServer,
    openai_completion,
    openai_error,
)

pytestmark = pytest.mark.anyio

KEY = "sk-proj-test-0123456789abcdefSECRET"
Maker = Callable[..., OpenAIModel]


class Order(BaseModel):
    variety: Literal["purple", "idaho"]
    bags: int


@pytest.fixture
async def make(clock: FakeClock) -> AsyncIterator[Maker]:
    """Builds models on the wire server; closes their connections after the test."""
    made: list[OpenAIModel] = []

    def build(
        wire: WireServer, *, key: str | None = KEY, base_url: str | None = None
    ) -> OpenAIModel:
        model = OpenAIModel(
            "gpt-test",
            api_key=key,
            base_url=base_url or f"{wire.url}/v1",
            sleep=clock.sleep,
            clock=clock.now,
        )
        made.append(model)
        return model

    yield build
    for model in made:
        await model.aclose()


def ask(output_type: type[BaseModel] | None = None) -> ModelRequest:
    return ModelRequest(
        expert="response",
        system="You are the shop.",
        messages=[
            {"role": "user", "content": "a bag of purple please"},
            {"role": "assistant", "content": "Ask the user to confirm one bag of purple"},
        ],
        output_type=output_type,
    )


async def test_text_body_and_cached_usage(wire: WireServer, make: Maker) -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 20,
        "total_tokens": 1020,
        "prompt_tokens_details": {"cached_tokens": 768},
    }
    wire.script(
        OPENAI_PATH,
        Reply(200, openai_completion("Please confirm.", usage=usage), {"x-request-id": "req_9"}),
    )
    response = await make(wire).request(ask())
    assert response.output == "Please confirm."
    assert response.usage.input_tokens == 232
    assert response.usage.cache_read_tokens == 768
    assert response.usage.output_tokens == 20
    assert response.provider_request_id == "req_9"
    [sent] = wire.requests_to(OPENAI_PATH)
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    # The instruction is a labelled block of the last user turn, never a trailing assistant
    # message (which a compatible server would continue, showing it to the customer).
    assert sent.body["messages"] == [
        {"role": "system", "content": "You are the shop."},
        {
            "role": "user",
            "content": f"a bag of purple please\n\n{INSTRUCTION_LABEL}\n"
            "Ask the user to confirm one bag of purple",
        },
    ]
    assert sent.body["max_tokens"] == 1024  # a server given by base URL
    assert "response_format" not in sent.body


async def test_json_schema_structured_output(wire: WireServer, make: Maker) -> None:
    wire.script(OPENAI_PATH, Reply(200, openai_completion('{"variety": "idaho", "bags": 2}')))
    response = await make(wire).request(ask(Order))
    assert response.output == Order(variety="idaho", bags=2)
    [sent] = wire.requests_to(OPENAI_PATH)
    assert sent.body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Order", "schema": Order.model_json_schema(), "strict": False},
    }


async def test_compatible_server_needs_no_key(wire: WireServer, make: Maker) -> None:
    wire.script(OPENAI_PATH, Reply(200, openai_completion("hi")))
    model = make(wire, key=None)
    assert model.name == f"openai:gpt-test@{wire.url}/v1"
    assert (await model.request(ask())).output == "hi"
    [sent] = wire.requests_to(OPENAI_PATH)
    assert sent.headers["authorization"] == f"Bearer {PLACEHOLDER_KEY}"


def test_openai_without_key_or_base_url_is_missing_key() -> None:
    with pytest.raises(MissingAPIKey, match="OPENAI_API_KEY"):
        OpenAIModel("gpt-test")


async def test_malformed_json_is_asked_again_with_the_error(wire: WireServer, make: Maker) -> None:
    wire.script(
        OPENAI_PATH,
        Reply(200, openai_completion('{"variety": "purple"')),
        Reply(200, openai_completion('```json\n{"variety": "purple", "bags": 3}\n```')),
    )
    response = await make(wire).request(ask(Order))
    assert response.output == Order(variety="purple", bags=3) and response.attempts == 2
    first, second = wire.requests_to(OPENAI_PATH)
    assert second.body["messages"][:-2] == first.body["messages"]
    bad, error_turn = second.body["messages"][-2:]
    assert bad == {"role": "assistant", "content": '{"variety": "purple"'}
    assert error_turn["role"] == "user" and "JSON" in error_turn["content"]


async def test_invalid_twice_raises(wire: WireServer, make: Maker) -> None:
    bad = openai_completion(json.dumps({"variety": "sweet", "bags": 1}))
    wire.script(OPENAI_PATH, Reply(200, bad), Reply(200, bad))
    with pytest.raises(OutputValidationError, match="variety"):
        await make(wire).request(ask(Order))
    assert len(wire.requests_to(OPENAI_PATH)) == 2


async def test_length_is_truncated_output_after_one_larger_try(
    wire: WireServer, make: Maker
) -> None:
    cut = Reply(200, openai_completion('{"vari', finish_reason="length"))
    wire.script(OPENAI_PATH, cut, cut)
    with pytest.raises(TruncatedOutput):
        await make(wire).request(ask(Order))
    sent = [
        r.body.get("max_completion_tokens", r.body.get("max_tokens"))
        for r in wire.requests_to(OPENAI_PATH)
    ]
    assert sent == [1024, 2048]


async def test_refusal(wire: WireServer, make: Maker) -> None:
    wire.script(OPENAI_PATH, Reply(200, openai_completion(None, refusal="I can't help")))
    with pytest.raises(Refusal):
        await make(wire).request(ask(Order))
    assert len(wire.requests_to(OPENAI_PATH)) == 1


async def test_insufficient_quota_is_one_request(wire: WireServer, make: Maker) -> None:
    body = openai_error("insufficient_quota", "You exceeded your quota", "insufficient_quota")
    wire.script(OPENAI_PATH, Reply(429, body))
    with pytest.raises(ProviderQuotaExhausted):
        await make(wire).request(ask())
    assert len(wire.requests_to(OPENAI_PATH)) == 1


async def test_rate_limit_then_success(wire: WireServer, make: Maker, clock: FakeClock) -> None:
    wire.script(
        OPENAI_PATH,
        Reply(429, openai_error("requests", "slow down"), {"retry-after": "2"}),
        Reply(200, openai_completion("ok")),
    )
    assert (await make(wire).request(ask())).output == "ok"
    assert clock.sleeps == [2.0] and len(wire.requests_to(OPENAI_PATH)) == 2


async def test_rate_limit_beyond_cap(wire: WireServer, make: Maker) -> None:
    wire.script(OPENAI_PATH, Reply(429, openai_error("requests"), {"retry-after": "120"}))
    with pytest.raises(RateLimited) as info:
        await make(wire).request(ask())
    assert info.value.retry_after == 120 and len(wire.requests_to(OPENAI_PATH)) == 1


async def test_persistent_503_is_four_requests(wire: WireServer, make: Maker) -> None:
    wire.script(OPENAI_PATH, *[Reply(503, openai_error("server_error"))] * 5)
    events: list[AttemptEvent] = []
    with observe_attempts(events.append), pytest.raises(ProviderOverloaded):
        await make(wire).request(ask())
    assert len(wire.requests_to(OPENAI_PATH)) == 4
    assert [e.will_retry for e in events] == [True, True, True, False]


async def test_400_is_one_request(wire: WireServer, make: Maker) -> None:
    wire.script(OPENAI_PATH, Reply(400, openai_error("invalid_request_error", "bad param")))
    with pytest.raises(ModelHTTPError, match="bad param"):
        await make(wire).request(ask())
    assert len(wire.requests_to(OPENAI_PATH)) == 1


async def test_401_never_shows_the_key(wire: WireServer, make: Maker) -> None:
    message = f"Incorrect API key provided: {KEY[:8]}****{KEY[-12:]}. Or {KEY}"
    wire.script(OPENAI_PATH, Reply(401, openai_error("invalid_request_error", message)))
    with structlog.testing.capture_logs() as logs, pytest.raises(ModelHTTPError) as info:
        await make(wire).request(ask())
    assert info.value.status_code == 401 and "OPENAI_API_KEY" in str(info.value)
    assert len(wire.requests_to(OPENAI_PATH)) == 1
    for text in (str(info.value), repr(info.value.body), repr(logs)):
        assert KEY not in text and KEY[-12:] not in text


async def test_should_retry_false_on_503(wire: WireServer, make: Maker) -> None:
    wire.script(OPENAI_PATH, Reply(503, openai_error("server_error"), {"x-should-retry": "false"}))
    with pytest.raises(ProviderOverloaded):
        await make(wire).request(ask())
    assert len(wire.requests_to(OPENAI_PATH)) == 1


async def test_error_inside_200_is_retried(wire: WireServer, make: Maker) -> None:
    wire.script(
        OPENAI_PATH,
        Reply(200, openai_error("server_error", "upstream failed")),
        Reply(200, openai_completion("ok")),
    )
    assert (await make(wire).request(ask())).output == "ok"
    assert len(wire.requests_to(OPENAI_PATH)) == 2


async def test_connection_refused(wire: WireServer, make: Maker, closed_port_url: str) -> None:
    with pytest.raises(ModelConnectionError) as info:
        await make(wire, base_url=f"{closed_port_url}/v1").request(ask())
    assert info.value.attempts == 4
