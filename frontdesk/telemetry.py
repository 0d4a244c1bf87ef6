"""OpenTelemetry traces of the turns and expert calls (and their metrics, `frontdesk.metrics`).

The OpenTelemetry API is optional (`pip install 'frontdesk[otel]'`): this is the one module
that imports it, guarded, and without it every span here is a no-op object. With the API
but no tracer provider set (the SDK is the application's choice) the API's own no-op
tracer answers, so nothing is recorded or sent either.

What is traced:
- `frontdesk.turn`, one span per turn: `gen_ai.conversation.id`, `frontdesk.category`,
  `frontdesk.turn.replayed`, `frontdesk.turn.held` (kept for a person, no model call),
  `frontdesk.turn.outcome`, and `frontdesk.audit.event_id` (the turn's `turn_started` row);
- `chat {model}`, a child span per expert call, after the OpenTelemetry GenAI semantic
  conventions (`gen_ai.operation.name`, `gen_ai.provider.name`, `gen_ai.request.model`,
  `gen_ai.response.model`, `gen_ai.usage.*`, `gen_ai.response.finish_reasons`), plus
  `frontdesk.expert`; each HTTP attempt is an event (`frontdesk.attempt`) carrying its
  audit row's id, and a failed call sets the span's error status and `error.type`;
- background work (compaction, learning memory, jobs) as spans of their own trace, linked
  to the turn that caused them (`link_to_current`);
- `frontdesk.job {kind}`, one root span per run of a durable job (`job`):
  `frontdesk.job.kind`, `frontdesk.job.id`, `frontdesk.job.key` (its lock: a digest, never
  a user id), `frontdesk.job.attempt` and `frontdesk.job.outcome` (`succeeded`, `retried`,
  `failed`, `given_back`); the expert calls a job makes are its children. Each run also
  counts in `frontdesk_job_runs` and `frontdesk_job_duration_seconds` (`frontdesk.metrics`).

No message text is put on a span: the audit event id is the reference to what was sent
and answered. Content capture is an explicit opt-in (`configure(capture_content=True)`
or `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`, the variable OpenTelemetry's
own GenAI instrumentations read), and what it captures goes through a `Redactor` first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import Token
from dataclasses import dataclass
from typing import Any

from frontdesk import metrics
from frontdesk.redaction import Redactor

try:
    from opentelemetry import context as _context
    from opentelemetry import trace as _trace
except ImportError:  # pragma: no cover - exercised in a venv without it (tests/test_telemetry)
    _trace = None  # type: ignore[assignment]
    _context = None  # type: ignore[assignment]

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "TRACER_NAME",
    "ExpertSpan",
    "JobSpan",
    "TurnSpan",
    "attempt",
    "available",
    "background",
    "configure",
    "current_ids",
    "expert_call",
    "job",
    "link_to_current",
    "provider_of",
    "request_model_of",
    "turn",
]

TRACER_NAME = "frontdesk"
"""The instrumentation scope of every frontdesk span."""
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
"""`true` puts the (redacted) messages and answers on the expert spans."""

Attributes = dict[str, str | bool | int | float | Sequence[str]]

_tracer: Any = _trace.get_tracer(TRACER_NAME) if _trace is not None else None


def _active_tracer() -> Any:
    """The tracer, or `None` while no SDK tracer provider is installed: the API's proxy
    would make spans that record nothing, and their context managers and context switches
    cost a turn a measurable part of its CPU (docs/benchmarks.md). A provider installed
    later is seen at the next span."""
    if _tracer is None:
        return None
    provider = _trace.get_tracer_provider()
    if isinstance(provider, _trace.ProxyTracerProvider | _trace.NoOpTracerProvider):
        return None
    return _tracer


@dataclass
class _Settings:
    capture_content: bool | None = None
    """`None`: read `CAPTURE_CONTENT_ENV`."""
    redactor: Redactor | None = None


_settings = _Settings()


def available() -> bool:
    """Whether the OpenTelemetry API is installed (else no span is ever made)."""
    return _trace is not None


def configure(*, capture_content: bool | None = None, redactor: Redactor | None = None) -> None:
    """Opt in (or out) of putting message content on the expert spans.

    Args:
        capture_content: `True` adds `gen_ai.input.messages` and `gen_ai.output.messages`,
            redacted; `None` goes back to reading `CAPTURE_CONTENT_ENV`.
        redactor: What captured content goes through (default: every built-in detector).
    """
    _settings.capture_content = capture_content
    _settings.redactor = redactor


def _capturing() -> bool:
    if _settings.capture_content is not None:
        return _settings.capture_content
    return os.environ.get(CAPTURE_CONTENT_ENV, "").strip().lower() in ("true", "1")


@functools.lru_cache(maxsize=256)
def provider_of(model: str) -> str:
    """`gen_ai.provider.name` of a model spec: `anthropic`, `openai`, else the spec's own
    prefix (`offline` for the stand-in, `function` for a test double)."""
    prefix = model.partition(":")[0].strip().lower()
    return prefix or "unknown"


@functools.lru_cache(maxsize=256)
def request_model_of(model: str) -> str:
    """The model name a spec sends (`anthropic:claude-haiku-4-5` -> `claude-haiku-4-5`;
    the base URL of `openai:NAME@URL` is left out: it names a host, not a model)."""
    _, sep, rest = model.partition(":")
    name = rest if sep else model
    return name.partition("@")[0] or model


class TurnSpan:
    """What a turn tells its span (and the turn metrics) as it goes."""

    __slots__ = (
        "category",
        "held",
        "outcome",
        "profile",
        "replayed",
        "span",
        "started",
        "turn_id",
        "variant",
        "_variant_token",
    )

    def __init__(self, span: Any) -> None:
        self.span = span
        self.started = time.perf_counter()
        self.turn_id = ""
        """The user message's id (the turn's id in the audit log)."""
        self.category = ""
        self.profile = ""
        """The profile (business) answering (a label of the turn metrics)."""
        self.outcome = "answered"
        self.replayed = False
        self.held = False
        self.variant = ""
        """The conversation's prompt variant (a label of the turn and cost metrics)."""
        self._variant_token: Token[str] | None = None

    def set_variant(self, variant: str | None) -> None:
        """The conversation's prompt variant (`None`: none): a label of this turn's count
        and of the cost of every expert call made in it, until the turn ends."""
        self.variant = variant or ""
        if variant:
            self._variant_token = metrics.turn_variant(self.variant)

    def _end(self) -> None:
        _count_turn(self)
        if self._variant_token is not None:
            metrics.reset_variant(self._variant_token)
            self._variant_token = None

    def audit_event(self, event_id: str) -> None:
        """The audit row that holds the turn's user message (`turn_started`)."""
        if self.span is not None and self.span.is_recording():
            self.span.set_attribute("frontdesk.audit.event_id", event_id)


def _span_error(span: Any, error: BaseException) -> None:
    if span is None or not span.is_recording():
        return
    span.set_attribute("error.type", type(error).__name__)
    span.set_status(_trace.Status(_trace.StatusCode.ERROR, type(error).__name__))


@contextlib.contextmanager
def turn(conversation_id: str) -> Iterator[TurnSpan]:
    """The `frontdesk.turn` span around one turn; counts the turn when it ends.

    The caller sets `turn_id`, `category`, `outcome`, `replayed` and `held` on the yielded
    object; an exception out of the block makes the outcome `failed` (and the span's status
    an error).
    """
    tracer = _active_tracer()
    if tracer is None:
        handle = TurnSpan(None)
        try:
            yield handle
        except BaseException:
            handle.outcome = "failed"
            raise
        finally:
            handle._end()
        return
    with tracer.start_as_current_span(
        "frontdesk.turn", record_exception=False, set_status_on_exception=False
    ) as span:
        handle = TurnSpan(span)
        try:
            yield handle
        except BaseException as e:
            handle.outcome = "failed"
            _span_error(span, e)
            raise
        finally:
            handle._end()
            if span.is_recording():
                attributes: Attributes = {
                    "gen_ai.conversation.id": conversation_id,
                    "frontdesk.turn.outcome": handle.outcome,
                    "frontdesk.turn.replayed": handle.replayed,
                    "frontdesk.turn.held": handle.held,
                }
                if handle.turn_id:
                    attributes["frontdesk.turn_id"] = handle.turn_id
                if handle.category:
                    attributes["frontdesk.category"] = handle.category
                if handle.profile:
                    attributes["frontdesk.profile"] = handle.profile
                span.set_attributes(attributes)


def _count_turn(handle: TurnSpan) -> None:
    metrics.turn(
        category=handle.category or "none",
        outcome=handle.outcome,
        seconds=time.perf_counter() - handle.started,
        profile=handle.profile,
        variant=handle.variant,
    )


class ExpertSpan:
    """What an expert call tells its `chat {model}` span (and the GenAI metrics)."""

    __slots__ = ("expert", "input_tokens", "model", "output_tokens", "span")

    def __init__(self, span: Any, expert: str, model: str) -> None:
        self.span = span
        self.expert = expert
        self.model = model
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None

    def answered(
        self,
        *,
        model: str,
        stop_reason: str | None,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int,
        cache_write_tokens: int,
        attempts: int,
    ) -> None:
        """The call's answer: who answered, why it stopped, the tokens it took.

        Args:
            input_tokens: Uncached input tokens (cache reads and writes are added to
                `gen_ai.usage.input_tokens`, as the conventions ask).
        """
        self.input_tokens = input_tokens + cache_read_tokens + cache_write_tokens
        self.output_tokens = output_tokens
        span = self.span
        if span is None or not span.is_recording():
            return
        attributes: Attributes = {
            "gen_ai.response.model": request_model_of(model) if model else self.model,
            "gen_ai.usage.input_tokens": self.input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
            "gen_ai.usage.cache_read.input_tokens": cache_read_tokens,
            "gen_ai.usage.cache_creation.input_tokens": cache_write_tokens,
            "frontdesk.attempts": attempts,
        }
        if stop_reason:
            attributes["gen_ai.response.finish_reasons"] = (stop_reason,)
        span.set_attributes(attributes)

    def content(self, system: str, messages: Sequence[Mapping[str, Any]], output: Any) -> None:
        """The call's messages and answer, redacted, when content capture is on."""
        span = self.span
        if span is None or not span.is_recording() or not _capturing():
            return
        redactor = _settings.redactor or Redactor()
        sent = [
            {"role": m["role"], "parts": [{"type": "text", "content": redactor.text(m["content"])}]}
            for m in messages
        ]
        shown = output if isinstance(output, str) else _jsonable(output)
        span.set_attributes(
            {
                "gen_ai.system_instructions": json.dumps(
                    [{"type": "text", "content": redactor.text(system)}]
                ),
                "gen_ai.input.messages": json.dumps(sent),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": redactor.text(shown)}],
                        }
                    ]
                ),
            }
        )


def _jsonable(value: Any) -> str:
    dump = getattr(value, "model_dump_json", None)
    return str(dump()) if callable(dump) else json.dumps(value, default=str)


def expert_call(expert: str, model: str) -> AbstractContextManager[ExpertSpan]:
    """The `chat {model}` span around one expert call (a child of the turn's span); counts
    its duration and tokens when it ends.

    Args:
        expert: `triage`, `request`, `response`, `summariser` or `memory`.
        model: The spec of the model asked (`anthropic:claude-haiku-4-5`).
    """
    tracer = _active_tracer()
    if tracer is None:  # No span: only the count (a plain object, no generator per call).
        return _CountedCall(expert, model)
    return _traced_call(tracer, expert, model)


class _CountedCall:
    """`expert_call` without a tracer: the call's metrics, counted when it ends."""

    __slots__ = ("_handle", "_provider", "_started")

    def __init__(self, expert: str, model: str) -> None:
        self._handle = ExpertSpan(None, expert, request_model_of(model))
        self._provider = provider_of(model)
        self._started = time.perf_counter()

    def __enter__(self) -> ExpertSpan:
        return self._handle

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        _count_call(self._handle, self._provider, self._started, kind.__name__ if kind else "")


@contextlib.contextmanager
def _traced_call(tracer: Any, expert: str, model: str) -> Iterator[ExpertSpan]:
    """`expert_call` with a tracer: the span, and the call's metrics."""
    provider, request_model = provider_of(model), request_model_of(model)
    started = time.perf_counter()
    error = ""
    attributes: Attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.request.model": request_model,
        "frontdesk.expert": expert,
    }
    with tracer.start_as_current_span(
        f"chat {request_model}",
        kind=_trace.SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        handle = ExpertSpan(span, expert, request_model)
        try:
            yield handle
        except BaseException as e:
            error = type(e).__name__
            if error == "CancelledError":  # Cut off (the deadline, a discarded guess).
                if span.is_recording():
                    span.set_attribute("frontdesk.cancelled", True)
            else:
                _span_error(span, e)
            raise
        finally:
            _count_call(handle, provider, started, error)


def _count_call(handle: ExpertSpan, provider: str, started: float, error: str) -> None:
    metrics.expert_call(
        expert=handle.expert,
        provider=provider,
        request_model=handle.model,
        seconds=time.perf_counter() - started,
        input_tokens=handle.input_tokens,
        output_tokens=handle.output_tokens,
        error_type=error,
    )


def attempt(
    *,
    number: int,
    audit_event_id: str,
    latency_ms: float,
    status_code: int | None,
    error: str | None,
    will_retry: bool,
    provider_request_id: str | None,
) -> None:
    """One HTTP attempt of the expert call in progress, as an event on its span.

    Args:
        error: `ErrorClass: message`; only the class is put on the span (a provider's
            message may quote what it was sent).
    """
    if _trace is None:
        return
    span = _trace.get_current_span()
    if not span.is_recording():
        return
    attributes: Attributes = {
        "frontdesk.attempt": number,
        "frontdesk.audit.event_id": audit_event_id,
        "frontdesk.latency_ms": latency_ms,
        "frontdesk.will_retry": will_retry,
    }
    if status_code is not None:
        attributes["http.response.status_code"] = status_code
    if error:
        attributes["error.type"] = error.partition(":")[0]
    if provider_request_id:
        attributes["gen_ai.response.id"] = provider_request_id
    span.add_event("frontdesk.attempt", attributes)
    span.set_attribute("frontdesk.audit.event_id", audit_event_id)


def link_to_current() -> Any:
    """The span in progress as something `background` can link to (`None`: no span)."""
    if _trace is None:
        return None
    context = _trace.get_current_span().get_span_context()
    return context if context.is_valid else None


@contextlib.contextmanager
def background(name: str, link: Any = None, *, conversation_id: str | None = None) -> Iterator[Any]:
    """A span for work done after a turn (compaction, memory, a job), in a trace of its own
    linked to the turn that caused it (`link`, from `link_to_current` in the turn).

    Yields the span (or `None` without the API), for more attributes.
    """
    if _tracer is None:
        yield None
        return
    links = [_trace.Link(link)] if link is not None else None
    attributes: Attributes = {}
    if conversation_id is not None:
        attributes["gen_ai.conversation.id"] = conversation_id
    with _tracer.start_as_current_span(
        name,
        context=_context.Context(),  # A root: the turn has ended, or soon will.
        links=links,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as e:
            _span_error(span, e)
            raise


class JobSpan:
    """What a job's run tells its span (and the job metrics): its outcome."""

    __slots__ = ("outcome", "span")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.outcome = "succeeded"
        """`succeeded`, `retried` (failed, runs again), `failed` (for good), `given_back`
        (cut by a runner's shutdown, to run again)."""

    def failed(self, error: BaseException, *, outcome: str) -> None:
        """The run failed with `error` (the job is `retried` or `failed` for good)."""
        self.outcome = outcome
        _span_error(self.span, error)


@contextlib.contextmanager
def job(
    kind: str, *, job_id: int | None, key: str | None, attempt: int, traced: bool = True
) -> Iterator[JobSpan]:
    """The `frontdesk.job {kind}` span around one run of a job (a root: the turn that
    recorded it may be long gone, in another process); counts the run when it ends.

    Args:
        kind: The job kind (or periodic job) name, e.g. `memory.learn`.
        job_id: The job row's id (`None` for a periodic run).
        key: The job's lock (a digest), if any.
        attempt: Which run this is (1 for the first).
        traced: `False` counts the run without a span (a sweep every second).

    The caller sets the outcome on the yielded object (`failed(error, outcome=...)`, or
    `outcome = "given_back"`); an exception out of the block that set none is `failed`.
    """
    started = time.perf_counter()
    tracer = _active_tracer()
    if tracer is None or not traced:
        handle = JobSpan(None)
        try:
            yield handle
        except BaseException:
            if handle.outcome == "succeeded":
                handle.outcome = "failed"
            raise
        finally:
            metrics.job(kind=kind, outcome=handle.outcome, seconds=time.perf_counter() - started)
        return
    attributes: Attributes = {"frontdesk.job.kind": kind, "frontdesk.job.attempt": attempt}
    if job_id is not None:
        attributes["frontdesk.job.id"] = job_id
    if key is not None:
        attributes["frontdesk.job.key"] = key
    with tracer.start_as_current_span(
        f"frontdesk.job {kind}",
        context=_context.Context(),
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        handle = JobSpan(span)
        try:
            yield handle
        except BaseException as e:
            if handle.outcome == "succeeded":
                handle.failed(e, outcome="failed")
            raise
        finally:
            metrics.job(kind=kind, outcome=handle.outcome, seconds=time.perf_counter() - started)
            if span.is_recording():
                span.set_attribute("frontdesk.job.outcome", handle.outcome)


def current_ids() -> tuple[str, str] | None:
    """The trace and span ids of the span in progress (hex, as log lines carry them)."""
    if _trace is None:
        return None
    context = _trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x"), format(context.span_id, "016x")
