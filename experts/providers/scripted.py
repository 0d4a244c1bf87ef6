"""`ScriptedModel`: a test double that answers calls from a fixed script, in order.

Each step is an answer (`ModelResponse`, `str`, `dict`, pydantic object), an exception to
raise, or a function of the request. The model records every request it receives, fails
loudly on a call past the end of the script (`UnexpectedModelCall`), and `assert_complete()`
fails when steps are left (`UnconsumedSteps`).

A speculative call (the request expert's, started beside triage) that the turn throws away
gives its step back: the extraction made after triage plays it. So a map of one
`ScriptedModel` per expert scripts a conversation the same with speculation on or off.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeAlias

from frontdesk.errors import UnconsumedSteps, UnexpectedModelCall
from frontdesk.experts.providers.base import ModelRequest, ModelResponse, StreamEvent
from frontdesk.experts.providers.function import (
    DEFAULT_CHUNK_CHARS,
    FunctionReply,
    call_reply,
    report_call,
    stream_answer,
    to_response,
)

Step: TypeAlias = FunctionReply | BaseException | Callable[[ModelRequest], Any]
"""One scripted answer, an exception to raise, or `fn(request) -> answer`."""


class ScriptedModel:
    """A model that plays `steps` back, one per call.

    Args:
        steps: The answers, in call order (a `StreamCut` streams its text, then fails).
        name: The model's name in responses and attempt events.
        chunk_chars: About how many characters each streamed text delta holds.
    """

    def __init__(
        self,
        steps: Iterable[Step],
        *,
        name: str = "scripted",
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
    ) -> None:
        self._steps: list[Step] = list(steps)
        """The steps not yet played, the next first."""
        self._name = name
        self.chunk_chars = chunk_chars
        self.calls: list[ModelRequest] = []
        """Every request whose answer was used or is pending (discarded ones are not)."""
        self.discarded: list[ModelRequest] = []
        """Speculative requests whose answer the turn threw away (their step given back)."""

    @property
    def name(self) -> str:
        """The name given at construction (`scripted` by default)."""
        return self._name

    @property
    def last_call(self) -> ModelRequest:
        """The most recent request; fails when the model was never called."""
        if not self.calls:
            raise AssertionError("ScriptedModel was never called")
        return self.calls[-1]

    @property
    def remaining(self) -> list[Step]:
        """Steps not yet played."""
        return list(self._steps)

    def assert_complete(self) -> None:
        """Fail unless every step was played.

        Raises:
            UnconsumedSteps: steps are left.
        """
        if self.remaining:
            raise UnconsumedSteps(self.remaining)

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Play the next step for `request`.

        Raises:
            UnexpectedModelCall: the script has no step left for this call.
        """
        step = self._take(request)
        started = time.perf_counter()
        try:
            response = to_response(await _play(step, request), request, self._name)
        except BaseException as exc:
            report_call(request, self._name, 1, started, None, exc)
            raise
        report_call(request, self._name, 1, started, response, None)
        return response

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Play the next step as a stream: its text in chunks of whole words, then the response.

        Raises:
            UnexpectedModelCall: the script has no step left for this call.
        """
        step = self._take(request)
        return stream_answer(request, self._name, lambda: _play(step, request), self.chunk_chars)

    def _take(self, request: ModelRequest) -> Step:
        if not self._steps:
            if request.speculation is not None:  # Fine if discarded: it was only a guess.
                request.speculation.on_discard(lambda: self.discarded.append(request))
            raise UnexpectedModelCall(request, len(self.calls))
        step = self._steps.pop(0)
        self.calls.append(request)
        if request.speculation is not None:
            request.speculation.on_discard(lambda: self._give_back(request, step))
        return step

    def _give_back(self, request: ModelRequest, step: Step) -> None:
        """A discarded speculative call's step is the next one played again."""
        for i, call in enumerate(self.calls):
            if call is request:
                del self.calls[i]
                break
        self.discarded.append(request)
        self._steps.insert(0, step)


async def _play(step: Step, request: ModelRequest) -> Any:
    """The answer one step gives `request` (raising the step's exception)."""
    if isinstance(step, BaseException):
        raise step
    return await call_reply(step, request) if callable(step) else step
