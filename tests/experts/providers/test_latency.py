"""`LatencyModel`: modelled time to first token and generation speed, on a fake clock."""

from __future__ import annotations

import pytest

from frontdesk.errors import ConfigError
from frontdesk.experts.providers import (
    FunctionModel,
    Latency,
    LatencyModel,
    ModelRequest,
    StreamDone,
    TextDelta,
    stream_of,
)
from tests.experts.providers.conftest import FakeClock

pytestmark = pytest.mark.anyio

TEXT = "x" * 296 + " end"  # 300 characters = 75 tokens at 4 characters a token


def ask(expert: str) -> ModelRequest:
    return ModelRequest(expert=expert, system="s", messages=[{"role": "user", "content": "hi"}])


def model(clock: FakeClock) -> LatencyModel:
    latencies = {
        "triage": Latency(ttft=0.3),
        "response": Latency(ttft=0.4, tokens_per_second=50),
    }
    return LatencyModel(FunctionModel(lambda _r: TEXT), latencies, sleep=clock.sleep)


async def test_request_waits_for_the_whole_answer(clock: FakeClock) -> None:
    latency = model(clock)
    await latency.request(ask("response"))
    assert sum(clock.sleeps) == pytest.approx(0.4 + 75 / 50, abs=0.01)
    clock.sleeps.clear()
    await latency.request(ask("triage"))
    assert sum(clock.sleeps) == pytest.approx(0.3, abs=0.01)


async def test_stream_gives_the_first_chunk_after_the_ttft(clock: FakeClock) -> None:
    latency = model(clock)
    waited_before: list[float] = []
    text = ""
    async for event in stream_of(latency, ask("response")):
        if isinstance(event, TextDelta):
            waited_before.append(sum(clock.sleeps))
            text += event.text
        else:
            assert isinstance(event, StreamDone) and event.response.output == TEXT
    assert text == TEXT
    assert waited_before[0] == pytest.approx(0.4)
    assert len(waited_before) > 1
    assert sum(clock.sleeps) == pytest.approx(0.4 + 75 / 50)


async def test_an_expert_not_in_the_map_answers_at_once(clock: FakeClock) -> None:
    await model(clock).request(ask("summariser"))
    assert sum(clock.sleeps) == pytest.approx(0.0, abs=0.01)


def test_chars_per_token_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="chars_per_token"):
        LatencyModel(FunctionModel(lambda _r: "x"), {}, chars_per_token=0)
