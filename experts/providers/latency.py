"""`LatencyModel`: a double that answers like another model, at a modelled provider speed.

Each expert has a time to first token and, optionally, a generation speed in tokens per
second (a token is `chars_per_token` characters of the answer). `request` returns after the
whole answer would have arrived; `stream` waits the time to first token, then hands the text
out chunk by chunk at the generation speed. Benchmarks use it to compare a streamed turn
with a sequential, non-streamed one without a network.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass

from frontdesk.errors import ConfigError
from frontdesk.experts.providers.base import (
    Model,
    ModelRequest,
    ModelResponse,
    StreamDone,
    StreamEvent,
    TextDelta,
    observe_attempts,
)
from frontdesk.experts.providers.function import DEFAULT_CHUNK_CHARS, report_call, text_chunks


@dataclass(frozen=True, kw_only=True)
class Latency:
    """How fast one expert's provider answers."""

    ttft: float
    """Seconds from sending to the first token."""
    tokens_per_second: float | None = None
    """Generation speed after the first token; `None`: the rest arrives at once."""

    def generation(self, text: str, chars_per_token: float) -> float:
        """Seconds to generate `text` after its first token."""
        if self.tokens_per_second is None:
            return 0.0
        return len(text) / chars_per_token / self.tokens_per_second


class LatencyModel:
    """`inner`'s answers, delayed as `latencies[request.expert]` says.

    Args:
        inner: The model whose answers are given (e.g. a `FunctionModel`).
        latencies: Per expert name (`triage`, `request`, `response`, `summariser`); an
            expert missing from the map answers at once.
        chars_per_token: Characters of text per generated token.
        chunk_chars: About how many characters each streamed delta holds.
        sleep: Async sleep (tests pass a fake clock's).
    """

    def __init__(
        self,
        inner: Model,
        latencies: Mapping[str, Latency],
        *,
        chars_per_token: float = 4.0,
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if chars_per_token <= 0:
            raise ConfigError(f"chars_per_token must be > 0, got {chars_per_token}")
        self.inner = inner
        self.latencies = dict(latencies)
        self.chars_per_token = chars_per_token
        self.chunk_chars = chunk_chars
        self._sleep = sleep

    @property
    def name(self) -> str:
        """The inner model's name."""
        return self.inner.name

    def _latency(self, request: ModelRequest) -> Latency:
        return self.latencies.get(request.expert, Latency(ttft=0.0))

    async def request(self, request: ModelRequest) -> ModelResponse:
        """The inner answer, once all of it would have arrived."""
        started = time.perf_counter()
        response = await _quietly(self.inner, request)
        latency = self._latency(request)
        total = latency.ttft + latency.generation(_text_of(response), self.chars_per_token)
        await self._sleep(max(0.0, total - (time.perf_counter() - started)))
        report_call(request, self.name, 1, started, response, None)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """The inner answer's text after the time to first token, at the generation speed."""
        started = time.perf_counter()
        response = await _quietly(self.inner, request)
        latency = self._latency(request)
        await self._sleep(latency.ttft)
        first_ms: float | None = None
        if isinstance(response.output, str):
            for piece in text_chunks(response.output, self.chunk_chars):
                if first_ms is None:
                    first_ms = (time.perf_counter() - started) * 1000
                yield TextDelta(text=piece)
                await self._sleep(latency.generation(piece, self.chars_per_token))
        report_call(request, self.name, 1, started, response, None, first_token_ms=first_ms)
        yield StreamDone(response=response)


def _text_of(response: ModelResponse) -> str:
    output = response.output
    return output if isinstance(output, str) else str(response.raw or "")


async def _quietly(inner: Model, request: ModelRequest) -> ModelResponse:
    """The inner answer without the inner model's own attempt report (this one reports)."""
    with observe_attempts(lambda _event: None):
        return await inner.request(request)
