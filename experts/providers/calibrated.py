"""A model wrapper that lets a token counter learn from every successful call.

The orchestrator wraps each expert's model in it, so the local token estimate follows the
input counts the provider reports (see `threads.tokens`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Callable

from frontdesk.experts.providers.base import (
    Model,
    ModelRequest,
    ModelResponse,
    StreamDone,
    StreamEvent,
    stream_of,
)

Calibrate = Callable[[ModelRequest, ModelResponse], None]
"""Sees each call's request and response (a token counter's calibration)."""


@dataclasses.dataclass(frozen=True)
class CalibratedModel:
    """Wraps a model so the token counter learns from every successful call.

    `calibrate` sees each call's request and response, so the counter can learn from the
    exact input counts the provider reports.
    """

    inner: Model
    calibrate: Calibrate

    @property
    def name(self) -> str:
        """The wrapped model's name."""
        return self.inner.name

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Call the wrapped model, then calibrate on its answer."""
        response = await self.inner.request(request)
        self.calibrate(request, response)
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream from the wrapped model, then calibrate on its final answer."""
        async for event in stream_of(self.inner, request):
            if isinstance(event, StreamDone):
                self.calibrate(request, event.response)
            yield event
