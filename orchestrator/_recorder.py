"""Collects one turn's audit events while it runs, for one batch append after the reply.

The turn passes its recorder to each expert call explicitly (`observer=`, an
`experts.CallObserver`), which marks the call's `ModelRequest` while it runs. Model
attempts arrive through the providers' attempt observer (`observing`, over
`experts.providers.observe_attempts`); the recorder pairs each with the request in
progress, so the row holds the system prompt reference, the exact messages sent and the
model's settings. An attempt cut off by the turn deadline reports nothing itself (the
task is cancelled under it), so the expert call records that attempt as it unwinds
(`cut_off`).

Each attempt is also an event on the expert call's span, with the id of its audit row
(the reference to its content), and its estimated cost is counted by expert
(`frontdesk_cost_usd_total`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import time
from typing import Any

from pydantic import BaseModel

from frontdesk import metrics, telemetry
from frontdesk.audit.events import AuditEvent, EventKind
from frontdesk.audit.pricing import cost_of
from frontdesk.audit.redaction import RULES_KEY
from frontdesk.experts.providers import (
    AttemptEvent,
    ModelRequest,
    ModelResponse,
    PromptRef,
    Usage,
    observe_attempts,
)
from frontdesk.experts.providers.base import plain_messages
from frontdesk.knowledge import Passage
from frontdesk.redaction import field_rules


def usage_dict(usage: Usage) -> dict[str, int]:
    """A `Usage` as the audit payload stores it (each of its fields, in their order: every
    attempt and every turn's outcome records one)."""
    return {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


_SCALAR = (int, float, str, bool, type(None))


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _field_names(kind: type) -> tuple[str, ...]:
    """A dataclass's field names, looked up once per class (`dataclasses.fields` builds a
    tuple of its fields on every call)."""
    names = _FIELD_NAMES.get(kind)
    if names is None:
        names = _FIELD_NAMES[kind] = tuple(f.name for f in dataclasses.fields(kind))
    return names


def _flat(value: Any) -> dict[str, Any]:
    """`dataclasses.asdict` of a dataclass of scalars (usage, settings, prompt reference),
    without its deep copy (the turn makes a dozen of these); anything else goes to it."""
    out = {name: getattr(value, name) for name in _field_names(type(value))}
    if all(type(v) in _SCALAR for v in out.values()):
        return out
    return dataclasses.asdict(value)


@functools.lru_cache(maxsize=256)
def _prompt_dict(prompt: PromptRef) -> dict[str, Any]:
    """A prompt reference as the audit payload stores it, made once per prompt."""
    return _flat(prompt)


def jsonable(value: Any) -> Any:
    """A JSON-able view of a parsed output (pydantic model, enum, str, ...)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict | list | str | int | float | bool) or value is None:
        return value
    return str(value)


def field_rules_of(request: Any) -> dict[str, Any]:
    """`{"redact": {path: rule}}` for a request whose model declares redaction rules (see
    `frontdesk.redaction.field_rules`), else `{}`: the rules travel with the recorded
    request, so `audit show` and the exports apply them without the application's code."""
    if not isinstance(request, BaseModel):
        return {}
    rules = field_rules(type(request))
    return {RULES_KEY: dict(rules)} if rules else {}


def without_system(body: Any, system: str) -> Any:
    """`body` with the system prompt's text replaced by a reference to its stored copy.

    The audit log keeps each prompt text once, by hash (`AuditEvent.system_prompt`); the
    wire body would otherwise repeat it in every attempt row.
    """
    if not system:
        return body
    return _without(body, system, _prompt_reference(system))


def _without(body: Any, text: str, reference: str) -> Any:
    """`body` with every string equal to `text` replaced by `reference`: the lists and
    dicts that hold one copied, the rest (most of a wire body: the thread) as it is."""
    kind = type(body)
    if kind is str:  # The most common value by far (a message's role and content).
        return reference if body == text else body
    if kind is dict or (kind is not list and isinstance(body, dict)):
        return _dict_without(body, text, reference)
    if kind is list or isinstance(body, list):
        return _list_without(body, text, reference)
    if isinstance(body, str):
        return reference if body == text else body
    return body


def _dict_without(body: dict[Any, Any], text: str, reference: str) -> dict[Any, Any]:
    """`_without` of a dict: a copy only when one of its values changes."""
    changed: dict[Any, Any] | None = None
    for key, value in body.items():
        if type(value) is str:
            if value != text:
                continue
            made: Any = reference
        else:
            made = _without(value, text, reference)
            if made is value:
                continue
        if changed is None:
            changed = dict(body)
        changed[key] = made
    return body if changed is None else changed


def _list_without(body: list[Any], text: str, reference: str) -> list[Any]:
    """`_without` of a list: a copy only when one of its items changes. A message (a dict)
    of strings none of which is `text` is read here, without a call per message."""
    copied: list[Any] | None = None
    for index, item in enumerate(body):
        kind = type(item)
        if kind is str:
            if item != text:
                continue
            made: Any = reference
        else:
            if kind is dict:
                for value in item.values():
                    if type(value) is not str or value == text:
                        break
                else:
                    continue  # Only other strings: nothing to replace.
            made = _without(item, text, reference)
            if made is item:
                continue
        if copied is None:
            copied = list(body)
        copied[index] = made
    return body if copied is None else copied


def passage_ref(passage: Passage) -> dict[str, Any]:
    """What the audit log records of a passage sent: enough to name the exact text."""
    return {
        "id": passage.id,
        "source": passage.source,
        "title": passage.title,
        "version": passage.version,
        "sha256": passage.sha256,
    }


@functools.lru_cache(maxsize=64)
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
    _call_attempts: int = 0
    _since: float = 0.0
    """When the call in progress started, or its last attempt ended (`perf_counter`)."""

    def note(self, kind: EventKind, **payload: Any) -> None:
        """Record a pipeline event (triage, request, outcome, reply, ...)."""
        self.events.append(AuditEvent(kind=kind, turn_id=self.turn_id, payload=payload))

    def expert_call(self, request: ModelRequest) -> _CallWindow:
        """Mark the expert call in progress, so its attempts carry its request."""
        return _CallWindow(self, request)

    def on_attempt(self, attempt: AttemptEvent) -> None:
        """Observer for model attempts: one `model_attempt` event each."""
        self._call_attempts, self._since = self._call_attempts + 1, time.perf_counter()
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
        if attempt.first_token_ms is not None:  # a streamed attempt
            payload["first_token_ms"] = round(attempt.first_token_ms, 3)
        system = None
        if request is not None:
            system = request.system
            payload["request_body"] = without_system(attempt.request_body, system)
            payload["messages"] = plain_messages(request.messages)
            payload["settings"] = request.settings.recorded()
            payload["output_type"] = request.output_type.__name__ if request.output_type else None
            if request.prompt is not None:
                payload["prompt"] = dict(_prompt_dict(request.prompt))
            if request.memory:  # Exactly which facts were sent (their text: `messages`).
                payload["memory"] = {"ids": list(request.memory_ids)}
            if request.passages:  # Which passages, at which version (their text: `messages`).
                payload["documents"] = [passage_ref(d) for d in request.passages]
        self._attempts.append(payload)
        event = AuditEvent(
            kind="model_attempt", turn_id=self.turn_id, payload=payload, system_prompt=system
        )
        self.events.append(event)
        telemetry.attempt(
            number=attempt.attempt,
            audit_event_id=event.event_id,
            latency_ms=payload["latency_ms"],
            status_code=attempt.status_code,
            error=attempt.error,
            will_retry=attempt.will_retry,
            provider_request_id=attempt.provider_request_id,
        )
        usage = attempt.usage
        if usage.total_input_tokens or usage.output_tokens:  # No tokens cost nothing.
            metrics.cost(
                expert=attempt.expert,
                model=telemetry.request_model_of(attempt.model),
                usd=cost_of(
                    attempt.model,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    cache_read_tokens=usage.cache_read_tokens,
                    cache_write_tokens=usage.cache_write_tokens,
                ).usd,
            )

    def cut_off(self, model: str) -> None:
        """Record the attempt of the call in progress that a cancellation cut off, unless the
        model reported it itself as it unwound (the doubles and the HTTP adapters do): its
        last reported attempt of this call is then final (`will_retry` false)."""
        last = self._attempts[-1] if self._attempts and self._call_attempts else None
        if last is not None and not last.get("will_retry"):
            return
        request = self._request
        self.on_attempt(
            AttemptEvent(
                expert=request.expert if request is not None else "",
                model=model,
                attempt=self._call_attempts + 1,
                latency_ms=(time.perf_counter() - self._since) * 1000,
                request_body=None,
                response_body=None,
                usage=Usage(),
                status_code=None,
                provider_request_id=None,
                stop_reason=None,
                error="Cancelled: cut off before it finished (the turn deadline, or the caller"
                " cancelled the turn)",
                will_retry=False,
                metadata=dict(request.metadata) if request is not None else {},
            )
        )

    def parsed(self, response: ModelResponse) -> None:
        """Attach the parsed output to the last (successful) attempt of the call."""
        if self._attempts:
            self._attempts[-1]["output"] = jsonable(response.output)


class _CallWindow:
    """`TurnRecorder.expert_call`'s window (a plain context manager: one per expert call)."""

    __slots__ = ("_recorder", "_request")

    def __init__(self, recorder: TurnRecorder, request: ModelRequest) -> None:
        self._recorder, self._request = recorder, request

    def __enter__(self) -> None:
        recorder = self._recorder
        recorder._request = self._request
        recorder._call_attempts, recorder._since = 0, time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self._recorder._request = None


def observing(recorder: TurnRecorder) -> contextlib.AbstractContextManager[None]:
    """Record every model attempt made inside this block (this task) as an audit event."""
    return observe_attempts(recorder.on_attempt)
