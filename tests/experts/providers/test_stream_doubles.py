"""The doubles and the offline model stream too, so tests and the demo can stream."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from frontdesk.errors import (
    ProviderOverloaded,
    Refusal,
    StreamInterrupted,
    UnexpectedModelCall,
)
from frontdesk.experts.providers import (
    AttemptEvent,
    FallbackModel,
    FunctionModel,
    Model,
    ModelRequest,
    ModelResponse,
    OfflineModel,
    ScriptedModel,
    StreamCut,
    StreamDone,
    StreamingModel,
    TextDelta,
    observe_attempts,
    request_streaming,
    stream_of,
)
from frontdesk.experts.providers.function import text_chunks

pytestmark = pytest.mark.anyio

REPLY = (
    "Thanks for your order, Priya. One bag of purple potatoes is reserved for you and"
    " will ship tomorrow morning; you will get a tracking number by email."
)


def ask(output_type: type[BaseModel] | None = None) -> ModelRequest:
    return ModelRequest(
        expert="response",
        system="You are the shop.",
        messages=[
            {"role": "user", "content": "a bag of purple please"},
            {"role": "assistant", "content": "Confirm one bag of purple"},
        ],
        output_type=output_type,
    )


async def collect(model: Model, request: ModelRequest) -> tuple[list[str], ModelResponse]:
    deltas: list[str] = []
    final: ModelResponse | None = None
    async for event in stream_of(model, request):
        assert final is None
        if isinstance(event, TextDelta):
            deltas.append(event.text)
        else:
            assert isinstance(event, StreamDone)
            final = event.response
    assert final is not None
    return deltas, final


@pytest.mark.parametrize(
    "text", ["", "one", "  lead and trail  ", "a\n\nb  c", REPLY, "x" * 80 + " y"]
)
def test_text_chunks_join_to_exactly_the_text(text: str) -> None:
    pieces = list(text_chunks(text, 24))
    assert "".join(pieces) == text
    assert all(pieces)


async def test_function_model_streams_its_text_in_several_chunks() -> None:
    model = FunctionModel(lambda _r: REPLY)
    events: list[AttemptEvent] = []

    with observe_attempts(events.append):
        deltas, response = await collect(model, ask())

    assert isinstance(model, StreamingModel)
    assert len(deltas) > 3
    assert "".join(deltas) == response.output == REPLY
    [event] = events
    assert event.first_token_ms is not None and event.first_token_ms <= event.latency_ms
    assert len(model.calls) == 1


async def test_scripted_model_streams_and_counts_the_call() -> None:
    model = ScriptedModel([REPLY], chunk_chars=10)
    deltas, response = await collect(model, ask())
    assert len(deltas) > 8 and "".join(deltas) == REPLY == response.output
    model.assert_complete()
    with pytest.raises(UnexpectedModelCall):
        stream_of(model, ask())


async def test_a_scripted_stream_cut_shows_text_then_raises_interrupted() -> None:
    model = ScriptedModel(
        [StreamCut(text=REPLY[:40], error=ProviderOverloaded("down", status_code=529))]
    )
    deltas: list[str] = []
    events: list[AttemptEvent] = []

    with observe_attempts(events.append), pytest.raises(StreamInterrupted) as info:
        async for event in stream_of(model, ask()):
            assert isinstance(event, TextDelta)
            deltas.append(event.text)

    assert "".join(deltas) == REPLY[:40] == info.value.partial_text
    assert isinstance(info.value.cause, ProviderOverloaded)
    [attempt] = events
    assert attempt.error is not None and "StreamInterrupted" in attempt.error


async def test_a_stream_cut_asked_without_streaming_raises_its_error() -> None:
    model = ScriptedModel([StreamCut(text="partial", error=Refusal("no"))])
    with pytest.raises(Refusal):
        await model.request(ask())


async def test_a_cut_with_no_text_fails_before_the_first_delta_with_the_error_itself() -> None:
    model = FunctionModel(
        lambda _r: StreamCut(text="", error=ProviderOverloaded("x", status_code=529))
    )
    with pytest.raises(ProviderOverloaded):
        await collect(model, ask())


async def test_a_double_raising_fails_the_stream_before_any_delta() -> None:
    def boom(_r: ModelRequest) -> str:
        raise ProviderOverloaded("overloaded", status_code=529)

    with pytest.raises(ProviderOverloaded):
        await collect(FunctionModel(boom), ask())


async def test_structured_output_is_never_streamed_partially() -> None:
    class Pick(BaseModel):
        category: str

    deltas, response = await collect(FunctionModel(lambda _r: {"category": "ORDER"}), ask(Pick))
    assert deltas == [] and response.output == Pick(category="ORDER")


async def test_offline_model_streams_its_reply() -> None:
    deltas, response = await collect(OfflineModel(), ask())
    assert "".join(deltas) == response.output
    assert str(response.output).startswith("[offline]")


class RequestOnly:
    """A third-party model with only the required part of the seam."""

    name = "request-only"

    async def request(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(output=REPLY, model=self.name)


async def test_streaming_is_optional_and_says_which_class_lacks_it() -> None:
    model = RequestOnly()
    assert isinstance(model, Model) and not isinstance(model, StreamingModel)
    with pytest.raises(NotImplementedError, match="RequestOnly"):
        stream_of(model, ask())
    seen: list[str] = []

    async def on_delta(text: str) -> None:
        seen.append(text)

    response = await request_streaming(model, ask(), on_delta)
    assert seen == [REPLY] and response.output == REPLY  # one delta: the whole text


async def test_fallback_streams_from_the_next_model_before_the_first_delta() -> None:
    down = ScriptedModel([ProviderOverloaded("down", status_code=529)])
    backup = ScriptedModel([REPLY])
    deltas, response = await collect(FallbackModel(down, backup), ask())
    assert "".join(deltas) == REPLY == response.output
    down.assert_complete()
    backup.assert_complete()


async def test_fallback_never_restarts_an_answer_after_text_was_shown() -> None:
    cut = StreamCut(text="Thanks for ", error=ProviderOverloaded("down", status_code=529))
    backup = ScriptedModel([REPLY])
    deltas: list[str] = []
    with pytest.raises(StreamInterrupted):
        async for event in stream_of(FallbackModel(ScriptedModel([cut]), backup), ask()):
            assert isinstance(event, TextDelta)
            deltas.append(event.text)
    assert "".join(deltas) == "Thanks for "
    assert backup.calls == []


async def test_a_consumer_that_stops_early_cancels_the_producer() -> None:
    model = FunctionModel(lambda _r: REPLY, chunk_chars=5)
    stream = stream_of(FallbackModel(model, ScriptedModel([])), ask())
    first = await stream.__anext__()
    assert isinstance(first, TextDelta)
    await stream.aclose()  # type: ignore[attr-defined]
    # Nothing is left running: a new stream on the same model works from scratch.
    deltas, response = await collect(model, ask())
    assert "".join(deltas) == REPLY
