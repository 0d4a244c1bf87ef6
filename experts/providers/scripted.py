"""`ScriptedModel`: a test double that answers calls from a fixed script, in order.

Each step is an answer (`ModelResponse`, `str`, `dict`, pydantic object), an exception to
raise, or a function of the request. The model records every request it receives, fails
loudly on a call past the end of the script (`UnexpectedModelCall`), and `assert_complete()`
fails when steps are left (`UnconsumedSteps`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

from frontdesk.experts.errors import UnconsumedSteps, UnexpectedModelCall
from frontdesk.experts.providers.base import ModelRequest, ModelResponse
from frontdesk.experts.providers.function import FunctionReply, call_reply, report_call, to_response

Step: TypeAlias = FunctionReply | BaseException | Callable[[ModelRequest], Any]
"""One scripted answer, an exception to raise, or `fn(request) -> answer`."""


class ScriptedModel:
    """A model that plays `steps` back, one per call.

    Args:
        steps: The answers, in call order.
        name: The model's name in responses and attempt events.
    """

    def __init__(self, steps: Iterable[Step], *, name: str = "scripted") -> None:
        self._steps: list[Step] = list(steps)
        self._name = name
        self.calls: list[ModelRequest] = []

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
        return self._steps[len(self.calls) :]

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
        index = len(self.calls)
        if index >= len(self._steps):
            raise UnexpectedModelCall(request, index)
        self.calls.append(request)
        step = self._steps[index]
        started = time.perf_counter()
        try:
            if isinstance(step, BaseException):
                raise step
            reply = await call_reply(step, request) if callable(step) else step
            response = to_response(reply, request, self._name)
        except BaseException as exc:
            report_call(request, self._name, 1, started, None, exc)
            raise
        report_call(request, self._name, 1, started, response, None)
        return response
