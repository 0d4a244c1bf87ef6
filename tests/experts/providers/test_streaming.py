"""Both adapters streaming through the real SDKs against the local SSE wire server.

Each case runs on the Anthropic messages stream and on OpenAI `chat.completion.chunk`s:
the happy path, a connection cut mid-stream, a stalled stream, a refusal, and a 529/500
before the first delta (retried under the one retry policy).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

import pytest
from pydantic import BaseModel

from frontdesk.errors import (
    ModelConnectionError,
    ProviderOverloaded,
    Refusal,
    StreamInterrupted,
    TruncatedOutput,
)
from frontdesk.experts.providers import (
    AttemptEvent,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    RetryConfig,
    StreamDone,
    TextDelta,
    observe_attempts,
    request_streaming,
)
from frontdesk.experts.providers._http import HTTPModel
from frontdesk.experts.providers.anthropic import AnthropicModel
from frontdesk.experts.providers.openai import OpenAIModel
from tests.experts.providers.conftest import FakeClock
from tests.experts.providers.wire_server import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    Reply,
    WireServer,
    anthropic_error,
    anthropic_sse,
    anthropic_tool,
    openai_error,
    openai_sse,
)

pytestmark = pytest.mark.anyio

KEY = "sk-test-0123456789abcdefSECRET"
TEXTS = ["Thanks, ", "Priya! ", "One bag ", "of purple ", "is on ", "its way."]


@dataclass(frozen=True)
class Wire:
    """One provider's wire format: its path, stream builders and model factory."""

    name: str
    path: str

    def stream(self, texts: list[str], **kwargs: Any) -> list[tuple[str | None, Any]]:
        if self.name == "anthropic":
            return anthropic_sse(texts, **kwargs)
        return openai_sse(texts, **kwargs)

    def overloaded(self) -> Reply:
        if self.name == "anthropic":
            return Reply(529, anthropic_error("overloaded_error", "Overloaded"))
        return Reply(500, openai_error("server_error", "The server had an error"))


WIRES = [Wire("anthropic", ANTHROPIC_PATH), Wire("openai", OPENAI_PATH)]
Maker = Callable[..., HTTPModel]


@pytest.fixture(params=WIRES, ids=lambda w: w.name)
def fmt(request: pytest.FixtureRequest) -> Wire:
    wire: Wire = request.param
    return wire


@pytest.fixture
async def make(clock: FakeClock, fmt: Wire) -> AsyncIterator[Maker]:
    made: list[HTTPModel] = []

    def build(wire: WireServer, retry: RetryConfig | None = None) -> HTTPModel:
        model: HTTPModel
        if fmt.name == "anthropic":
            model = AnthropicModel(
                "claude-test",
                api_key=KEY,
                base_url=wire.url,
                retry=retry,
                sleep=clock.sleep,
                clock=clock.now,
            )
        else:
            model = OpenAIModel(
                "gpt-test",
                api_key=KEY,
                base_url=f"{wire.url}/v1",
                retry=retry,
                sleep=clock.sleep,
                clock=clock.now,
            )
        made.append(model)
        return model

    yield build
    for model in made:
        await model.aclose()


def ask(timeout: float = 5.0, output_type: type[BaseModel] | None = None) -> ModelRequest:
    return ModelRequest(
        expert="response",
        system="You are the shop.",
        messages=[
            {"role": "user", "content": "a bag of purple please"},
            {"role": "assistant", "content": "Confirm one bag of purple"},
        ],
        output_type=output_type,
        settings=ModelSettings(max_tokens=200, timeout=timeout),
    )


async def collect(model: HTTPModel, request: ModelRequest) -> tuple[list[str], ModelResponse]:
    """The deltas and the final response of one stream (fails if the order is wrong)."""
    deltas: list[str] = []
    final: ModelResponse | None = None
    async for event in model.stream(request):
        assert final is None, "an event came after StreamDone"
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        else:
            assert isinstance(event, StreamDone)
            final = event.response
    assert final is not None
    return deltas, final


async def read_until_error(model: HTTPModel, request: ModelRequest) -> tuple[list[str], Exception]:
    deltas: list[str] = []
    with pytest.raises(Exception) as info:
        async for event in model.stream(request):
            assert isinstance(event, TextDelta), "the stream finished instead of failing"
            deltas.append(event.text)
    assert isinstance(info.value, Exception)
    return deltas, info.value


async def test_happy_path_deltas_join_to_the_text_and_usage_is_read(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    if fmt.name == "anthropic":
        usage: dict[str, Any] = {
            "input_tokens": 11,
            "cache_read_input_tokens": 300,
            "cache_creation_input_tokens": 40,
        }
        sse = fmt.stream(TEXTS, usage=usage, output_tokens=9)
    else:
        usage = {
            "prompt_tokens": 311,
            "completion_tokens": 9,
            "total_tokens": 320,
            "prompt_tokens_details": {"cached_tokens": 300},
        }
        sse = fmt.stream(TEXTS, usage=usage)
    wire.script(fmt.path, Reply(200, sse=sse, headers={"request-id": "r1", "x-request-id": "r1"}))
    events: list[AttemptEvent] = []

    with observe_attempts(events.append):
        deltas, response = await collect(make(wire), ask())

    assert deltas == TEXTS  # the provider's own chunks, in order, none merged
    assert "".join(deltas) == response.output == "".join(TEXTS)
    assert response.usage.output_tokens == 9
    assert response.usage.cache_read_tokens == 300
    assert response.usage.input_tokens == 11
    if fmt.name == "anthropic":
        assert response.usage.cache_write_tokens == 40
        assert response.stop_reason == "end_turn"
    else:
        assert response.stop_reason == "stop"
    assert response.provider_request_id == "r1"
    assert response.attempts == 1
    [sent] = wire.requests_to(fmt.path)
    assert sent.body["stream"] is True
    if fmt.name == "openai":
        assert sent.body["stream_options"] == {"include_usage": True}
    [event] = events
    assert event.error is None
    assert event.request_body["stream"] is True
    assert event.first_token_ms is not None
    assert 0 < event.first_token_ms <= event.latency_ms
    assert "".join(TEXTS) in str(event.response_body)  # the audit keeps the full text
    assert event.usage == response.usage


async def test_request_streaming_hands_each_delta_on_as_it_arrives(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    wire.script(fmt.path, Reply(200, sse=fmt.stream(TEXTS)))
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    response = await request_streaming(make(wire), ask(), on_delta)

    assert seen == TEXTS and response.output == "".join(TEXTS)


async def test_a_connection_cut_after_deltas_raises_stream_interrupted_without_retry(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    sse = fmt.stream(TEXTS)
    first_text = next(i for i, (_, data) in enumerate(sse) if "Thanks" in str(data))
    wire.script(fmt.path, Reply(200, sse=sse, cut_after=first_text + 3), Reply(200, sse=sse))
    events: list[AttemptEvent] = []

    with observe_attempts(events.append):
        deltas, error = await read_until_error(make(wire), ask())

    assert deltas == TEXTS[:3]
    assert isinstance(error, StreamInterrupted)
    assert error.partial_text == "".join(TEXTS[:3])
    assert isinstance(error.cause, ModelConnectionError)
    assert "not retried silently" in str(error)
    assert len(wire.requests_to(fmt.path)) == 1  # no silent retry after the first delta
    [event] = events
    assert event.error is not None and "StreamInterrupted" in event.error
    assert event.will_retry is False
    assert event.first_token_ms is not None


async def test_a_cut_before_the_first_delta_is_retried(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    sse = fmt.stream(TEXTS)
    wire.script(fmt.path, Reply(200, sse=sse, cut_after=1), Reply(200, sse=sse))

    deltas, response = await collect(make(wire), ask())

    assert "".join(deltas) == response.output == "".join(TEXTS)
    assert response.attempts == 2
    assert len(wire.requests_to(fmt.path)) == 2


async def test_a_stream_that_ends_without_its_stop_is_not_an_answer(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    """A clean end of body with no message_stop / finish_reason: cut, not a short reply."""
    sse = fmt.stream(TEXTS)
    # Anthropic: drop message_delta and message_stop; OpenAI: the finish, usage and [DONE].
    wire.script(fmt.path, Reply(200, sse=sse[:-3]))

    deltas, error = await read_until_error(make(wire), ask())

    assert "".join(deltas) == "".join(TEXTS)
    assert isinstance(error, StreamInterrupted)
    assert isinstance(error.cause, ModelConnectionError)
    assert "ended before" in str(error.cause)


async def test_a_stall_after_the_first_delta_times_out_without_retry(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    sse = fmt.stream(TEXTS)
    first_text = next(i for i, (_, data) in enumerate(sse) if "Thanks" in str(data))
    wire.script(fmt.path, Reply(200, sse=sse, stall_after=first_text + 2, stall_seconds=3))

    deltas, error = await read_until_error(make(wire), ask(timeout=0.3))

    assert deltas == TEXTS[:2]
    assert isinstance(error, StreamInterrupted)
    assert isinstance(error.cause, ModelConnectionError)
    assert "timed out" in str(error.cause)
    assert len(wire.requests_to(fmt.path)) == 1


async def test_a_stall_before_the_first_delta_times_out_and_is_retried(
    wire: WireServer, make: Maker, fmt: Wire, clock: FakeClock
) -> None:
    sse = fmt.stream(TEXTS)
    wire.script(fmt.path, Reply(200, sse=sse, stall_after=1, stall_seconds=3), Reply(200, sse=sse))

    deltas, response = await collect(make(wire), ask(timeout=0.3))

    assert "".join(deltas) == response.output
    assert response.attempts == 2
    assert len(clock.sleeps) == 1  # one backoff, under the retry policy


async def test_a_stall_on_every_attempt_ends_with_a_typed_timeout(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    stalled = Reply(200, sse=fmt.stream(TEXTS), stall_after=1, stall_seconds=3)
    wire.script(fmt.path, stalled, stalled)
    model = make(wire, retry=RetryConfig(max_attempts=2))

    deltas, error = await read_until_error(model, ask(timeout=0.2))

    assert deltas == []
    assert isinstance(error, ModelConnectionError)
    assert "timed out" in str(error) and error.attempts == 2


async def test_overloaded_before_the_first_delta_is_retried(
    wire: WireServer, make: Maker, fmt: Wire, clock: FakeClock
) -> None:
    wire.script(fmt.path, fmt.overloaded(), Reply(200, sse=fmt.stream(TEXTS)))
    events: list[AttemptEvent] = []

    with observe_attempts(events.append):
        deltas, response = await collect(make(wire), ask())

    assert "".join(deltas) == response.output == "".join(TEXTS)
    assert response.attempts == 2
    assert [e.will_retry for e in events] == [True, False]
    assert events[0].error is not None and "ProviderOverloaded" in events[0].error
    assert events[0].first_token_ms is None
    assert len(clock.sleeps) == 1


async def test_persistent_overload_spends_the_budget_then_raises_typed(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    wire.script(fmt.path, *[fmt.overloaded()] * 4)

    deltas, error = await read_until_error(make(wire), ask())

    assert deltas == []
    assert isinstance(error, ProviderOverloaded)
    assert len(wire.requests_to(fmt.path)) == 4  # the budget, not SDK x policy


@pytest.mark.parametrize("fmt", [WIRES[0]], ids=["anthropic"], indirect=True)
async def test_anthropic_sse_error_event_before_and_after_the_first_delta(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    """RELIABILITY P7 streamed: a 200 whose stream carries `error` `overloaded_error`."""
    error_event = ("error", anthropic_error("overloaded_error", "Overloaded"))
    sse = fmt.stream(TEXTS)
    before = [*sse[:1], error_event]
    after = [*sse[:6], error_event]
    wire.script(fmt.path, Reply(200, sse=before), Reply(200, sse=sse), Reply(200, sse=after))
    model = make(wire)

    deltas, response = await collect(model, ask())
    assert "".join(deltas) == response.output and response.attempts == 2

    deltas, error = await read_until_error(model, ask())
    assert deltas == TEXTS[:3]
    assert isinstance(error, StreamInterrupted)
    assert isinstance(error.cause, ProviderOverloaded)  # read from body.error.type in a 200
    assert len(wire.requests_to(fmt.path)) == 3


async def test_a_refusal_read_from_the_stream(wire: WireServer, make: Maker, fmt: Wire) -> None:
    if fmt.name == "anthropic":
        sse = fmt.stream([], stop_reason="refusal")
    else:
        sse = fmt.stream([], refusal=["I can't ", "help with that."])
    wire.script(fmt.path, Reply(200, sse=sse))

    deltas, error = await read_until_error(make(wire), ask())

    assert deltas == []  # a refusal's own text is never shown as the reply
    assert isinstance(error, Refusal)
    assert len(wire.requests_to(fmt.path)) == 1  # a refusal is not retried


async def test_a_refusal_after_some_text_is_interrupted_with_the_refusal_as_cause(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    if fmt.name == "anthropic":
        sse = fmt.stream(TEXTS[:2], stop_reason="refusal")
    else:
        sse = fmt.stream(TEXTS[:2], finish_reason="content_filter")
    wire.script(fmt.path, Reply(200, sse=sse))

    deltas, error = await read_until_error(make(wire), ask())

    assert deltas == TEXTS[:2]
    assert isinstance(error, StreamInterrupted) and isinstance(error.cause, Refusal)
    assert len(wire.requests_to(fmt.path)) == 1


async def test_truncated_after_text_is_interrupted_never_resent(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    stop = {"stop_reason": "max_tokens"} if fmt.name == "anthropic" else {}
    finish = {} if fmt.name == "anthropic" else {"finish_reason": "length"}
    wire.script(fmt.path, Reply(200, sse=fmt.stream(TEXTS, **stop, **finish)))

    deltas, error = await read_until_error(make(wire), ask())

    assert "".join(deltas) == "".join(TEXTS)
    assert isinstance(error, StreamInterrupted) and isinstance(error.cause, TruncatedOutput)
    assert len(wire.requests_to(fmt.path)) == 1


async def test_an_empty_stream_is_asked_again(wire: WireServer, make: Maker, fmt: Wire) -> None:
    """No text at all: nothing was shown, so the policy's re-ask applies as for `request`."""
    wire.script(fmt.path, Reply(200, sse=fmt.stream([])), Reply(200, sse=fmt.stream(TEXTS)))

    deltas, response = await collect(make(wire), ask())

    assert "".join(deltas) == response.output and response.attempts == 2


async def test_a_structured_request_is_never_shown_partially(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    class Order(BaseModel):
        variety: Literal["purple", "idaho"]

    if fmt.name == "anthropic":
        reply = Reply(200, anthropic_tool("Order", {"variety": "purple"}))
    else:
        from tests.experts.providers.wire_server import openai_completion

        reply = Reply(200, openai_completion('{"variety": "purple"}'))
    wire.script(fmt.path, reply)

    deltas, response = await collect(make(wire), ask(output_type=Order))

    assert deltas == []
    assert response.output == Order(variety="purple")
    [sent] = wire.requests_to(fmt.path)
    assert "stream" not in sent.body


async def test_a_consumer_that_stops_reading_closes_the_stream(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    """Client gone: closing the iterator ends the attempt; the model serves the next call."""
    wire.script(
        fmt.path,
        Reply(200, sse=fmt.stream(TEXTS), stall_after=5, stall_seconds=3),
        Reply(200, sse=fmt.stream(TEXTS)),
    )
    model = make(wire)
    events: list[AttemptEvent] = []

    with observe_attempts(events.append):
        stream = model.stream(ask(timeout=5))
        first = await stream.__anext__()
        assert isinstance(first, TextDelta)
        await stream.aclose()  # type: ignore[attr-defined]

    [abandoned] = events  # abandoned: reported, never as an answer
    assert abandoned.error is not None and "cancelled" in abandoned.error
    assert abandoned.will_retry is False and abandoned.first_token_ms is not None
    deltas, response = await collect(model, ask())
    assert "".join(deltas) == response.output


@pytest.mark.parametrize("fmt", [WIRES[1]], ids=["openai"], indirect=True)
async def test_openai_error_chunk_before_and_after_the_first_delta(
    wire: WireServer, make: Maker, fmt: Wire
) -> None:
    """An error object sent as a chunk of a 200 stream is classified by its type."""
    error_chunk = (None, openai_error("server_error", "The server had an error"))
    sse = fmt.stream(TEXTS)
    before = [*sse[:1], error_chunk]
    after = [*sse[:4], error_chunk]
    wire.script(fmt.path, Reply(200, sse=before), Reply(200, sse=sse), Reply(200, sse=after))
    model = make(wire)

    deltas, response = await collect(model, ask())
    assert "".join(deltas) == response.output and response.attempts == 2

    deltas, error = await read_until_error(model, ask())
    assert deltas == TEXTS[:3]
    assert isinstance(error, StreamInterrupted)
    assert isinstance(error.cause, ProviderOverloaded)
    assert len(wire.requests_to(fmt.path)) == 3
