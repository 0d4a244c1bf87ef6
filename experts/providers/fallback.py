"""`FallbackModel`: try another model once a model's own retries are spent."""

from __future__ import annotations

from collections.abc import AsyncIterator

import structlog

from frontdesk.errors import (
    ConfigError,
    ModelConnectionError,
    ModelError,
    ProviderOverloaded,
    RateLimited,
)
from frontdesk.experts.providers.base import (
    Model,
    ModelRequest,
    ModelResponse,
    OnDelta,
    StreamEvent,
    events_from_callback,
    request_streaming,
)

log = structlog.get_logger("frontdesk.providers")

DEFAULT_FALLBACK_ON: tuple[type[ModelError], ...] = (
    ProviderOverloaded,
    ModelConnectionError,
    RateLimited,
)
"""Outages worth another provider; bad requests, refusals and quota errors are not."""


class FallbackModel:
    """A model that falls back to the next one when the current one is out of service.

    Args:
        primary: The model tried first (with its own retry policy).
        *fallbacks: Models tried in order, each once, after the previous one failed with
            one of `fallback_on`.
        fallback_on: The error types that move on to the next model.
    """

    def __init__(
        self,
        primary: Model,
        *fallbacks: Model,
        fallback_on: tuple[type[Exception], ...] = DEFAULT_FALLBACK_ON,
    ) -> None:
        if not fallbacks:
            raise ConfigError("FallbackModel needs at least one fallback model after the primary")
        self.models: tuple[Model, ...] = (primary, *fallbacks)
        self.fallback_on = fallback_on

    @property
    def name(self) -> str:
        """The primary's name; `ModelResponse.model` says which model answered."""
        return self.models[0].name

    async def aclose(self) -> None:
        """Close the wrapped models' HTTP clients."""
        for model in self.models:
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer with the first model that does not fail with one of `fallback_on`."""
        return await self._answer(request, None)

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream from the first model that does not fail before its first delta.

        Once text was handed on, the failure (`StreamInterrupted`) ends the stream: no
        other model is asked to start the answer again.
        """
        return events_from_callback(lambda on_delta: self._answer(request, on_delta))

    async def _answer(self, request: ModelRequest, on_delta: OnDelta | None) -> ModelResponse:
        last = len(self.models) - 1
        for index, model in enumerate(self.models):
            try:
                return await request_streaming(model, request, on_delta)
            except self.fallback_on as exc:
                if index == last:
                    raise
                log.warning(
                    "model_fallback",
                    expert=request.expert,
                    failed=model.name,
                    error_class=type(exc).__name__,
                    next=self.models[index + 1].name,
                )
        raise AssertionError("unreachable")  # pragma: no cover
