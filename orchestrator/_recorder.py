"""Collects one turn's audit events while it runs, for one batch append after the reply.

The turn passes its recorder to each expert call explicitly (`observer=`, an
`experts.CallObserver`), which marks the call's `ModelRequest` while it runs. Model
attempts arrive through the providers' attempt observer (`observing`, over
`experts.providers.observe_attempts`); the recorder pairs each with the request in
progress, so the row holds the system prompt reference, the exact messages sent and the
model's settings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

from frontdesk.audit.events import AuditEvent, EventKind
from frontdesk.experts.providers import (
    AttemptEvent,
    Model,
    ModelRequest,
    ModelResponse,
    Usage,
    observe_attempts,
)


def usage_dict(usage: Usage) -> dict[str, int]:
    """A `Usage` as the audit payload stores it."""
    return dataclasses.asdict(usage)


def jsonable(value: Any) -> Any:
    """A JSON-able view of a parsed output (pydantic model, enum, str, ...)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict | list | str | int | float | bool) or value is None:
        return value
    return str(value)


def without_system(body: Any, system: str) -> Any:
    """`body` with the system prompt's text replaced by a reference to its stored copy.

    The audit log keeps each prompt text once, by hash (`AuditEvent.system_prompt`); the
    wire body would otherwise repeat it in every attempt row.
    """
    if not system:
        return body
    if isinstance(body, str):
        return _prompt_reference(system) if body == system else body
    if isinstance(body, list):
        return [without_system(item, system) for item in body]
    if isinstance(body, dict):
        return {key: without_system(value, system) for key, value in body.items()}
    return body


def _prompt_reference(system: str) -> str:
    digest = hashlib.sha256(system.encode("utf-8", "surrogatepass")).hexdigest()
    return f"[system prompt sha256:{digest}, stored once in the audit log]"


@dataclasses.dataclass
class TurnRecorder:
    """The events of one turn, in the order they happened."""

    turn_id: str
    events: list[AuditEvent] = dataclasses.field(default_factory=list)
    _request: ModelRequest | None = None
    _attempts: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def note(self, kind: EventKind, **payload: Any) -> None:
        """Record a pipeline event (triage, request, outcome, reply, ...)."""
        self.events.append(AuditEvent(kind=kind, turn_id=self.turn_id, payload=payload))

    @contextlib.contextmanager
    def expert_call(self, request: ModelRequest) -> Iterator[None]:
        """Mark the expert call in progress, so its attempts carry its request."""
        self._request = request
        try:
            yield
        finally:
            self._request = None

    def on_attempt(self, attempt: AttemptEvent) -> None:
        """Observer for model attempts: one `model_attempt` event each."""
        request = self._request
        payload: dict[str, Any] = {
            "expert": attempt.expert,
            "model": attempt.model,
            "attempt": attempt.attempt,
            "latency_ms": round(attempt.latency_ms, 3),
            "request_body": attempt.request_body,
            "response_body": attempt.response_body,
            "usage": usage_dict(attempt.usage),
            "status_code": attempt.status_code,
            "provider_request_id": attempt.provider_request_id,
            "stop_reason": attempt.stop_reason,
            "error": attempt.error,
            "will_retry": attempt.will_retry,
        }
        system = None
        if request is not None:
            system = request.system
            payload["request_body"] = without_system(attempt.request_body, system)
            payload["messages"] = [dict(m) for m in request.messages]
            payload["settings"] = dataclasses.asdict(request.settings)
            payload["output_type"] = request.output_type.__name__ if request.output_type else None
            if request.prompt is not None:
                payload["prompt"] = dataclasses.asdict(request.prompt)
        self._attempts.append(payload)
        self.events.append(
            AuditEvent(
                kind="model_attempt", turn_id=self.turn_id, payload=payload, system_prompt=system
            )
        )

    def parsed(self, response: ModelResponse) -> None:
        """Attach the parsed output to the last (successful) attempt of the call."""
        if self._attempts:
            self._attempts[-1]["output"] = jsonable(response.output)


@contextlib.contextmanager
def observing(recorder: TurnRecorder) -> Iterator[None]:
    """Record every model attempt made inside this block (this task) as an audit event."""
    with observe_attempts(recorder.on_attempt):
        yield


Calibrate = Callable[[ModelRequest, ModelResponse], None]


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
