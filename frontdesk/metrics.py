"""Prometheus metrics of the turns and expert calls, for `GET /metrics` (`frontdesk serve`).

`prometheus_client` is optional (it comes with the `serve` and `otel` extras): without it
every function here is a no-op, so the library runs the same with or without it. The
instruments are registered on `prometheus_client`'s default registry, so an application
that already serves that registry shows them with its own.

Names are the OpenTelemetry GenAI metric names translated as the OpenTelemetry Prometheus
compatibility rules say (dots become underscores, the unit `s` becomes a `_seconds`
suffix, an annotation unit like `{token}` adds none): `gen_ai.client.token.usage` is
`gen_ai_client_token_usage`, `gen_ai.client.operation.duration` is
`gen_ai_client_operation_duration_seconds`. Attributes become labels the same way
(`gen_ai.request.model` is `gen_ai_request_model`). frontdesk's own metrics start with
`frontdesk_`. The list, with alert suggestions, is in docs/operations.md.

Several worker processes (`frontdesk serve --workers N`) each count their own share:
`serve` sets `PROMETHEUS_MULTIPROC_DIR` before the workers start, `prometheus_client` then
keeps the values in files there, and a scrape of any worker adds every worker's values
up (`exposition`). What is read from the database at scrape time (the hand-off queue,
the jobs) is the same from any worker and is not kept in those files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any

try:
    import prometheus_client as _prom
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.registry import Collector
except ImportError:  # pragma: no cover - exercised in a venv without it (tests/test_telemetry)
    _prom = None  # type: ignore[assignment]

__all__ = [
    "CONTENT_TYPE",
    "MULTIPROCESS_ENV",
    "OperationsSnapshot",
    "available",
    "cost",
    "expert_call",
    "exposition",
    "feedback",
    "first_token",
    "job",
    "rate_limited",
    "reset_variant",
    "screen_verdict",
    "turn",
    "turn_variant",
]

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The folder `prometheus_client` keeps every worker's values in (multiprocess mode)."""
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format."""

# The bucket boundaries the OpenTelemetry GenAI conventions advise for these histograms.
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48)
FIRST_TOKEN_BUCKETS = (0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)

_GENAI = ("gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model")


class _Instruments:
    """The instruments, built once when `prometheus_client` is there."""

    def __init__(self) -> None:
        assert _prom is not None
        self.token_usage = _prom.Histogram(
            "gen_ai_client_token_usage",
            "Tokens used per expert call (gen_ai.client.token.usage), by token type"
            " (input includes cache reads and writes).",
            [*_GENAI, "gen_ai_token_type", "frontdesk_expert"],
            buckets=TOKEN_BUCKETS,
        )
        self.operation_duration = _prom.Histogram(
            "gen_ai_client_operation_duration_seconds",
            "Seconds per expert call, retries included (gen_ai.client.operation.duration).",
            [*_GENAI, "frontdesk_expert", "error_type"],
            buckets=DURATION_BUCKETS,
        )
        self.turns = _prom.Counter(
            "frontdesk_turns",
            "Turns by category and outcome (answered, need_more_info, handoff, held,"
            " replayed, failed), the profile (business) that answered, and the"
            " conversation's prompt variant (empty without variants).",
            ["frontdesk_category", "frontdesk_outcome", "frontdesk_profile", "frontdesk_variant"],
        )
        self.turn_duration = _prom.Histogram(
            "frontdesk_turn_duration_seconds",
            "Seconds from a turn's start to its stored reply (or failure), by outcome.",
            ["frontdesk_outcome"],
            buckets=DURATION_BUCKETS,
        )
        self.first_token = _prom.Histogram(
            "frontdesk_turn_time_to_first_token_seconds",
            "Seconds from a streamed turn's start to the first text delta of its reply.",
            buckets=FIRST_TOKEN_BUCKETS,
        )
        self.cost = _prom.Counter(
            "frontdesk_cost_usd",
            "Estimated USD spent on model calls (list prices, audit/pricing.py), by expert,"
            " and the conversation's prompt variant for a turn's calls (empty otherwise).",
            ["frontdesk_expert", "gen_ai_request_model", "frontdesk_variant"],
        )
        self.job_runs = _prom.Counter(
            "frontdesk_job_runs",
            "Runs of background jobs by kind and outcome (succeeded, retried, failed,"
            " given_back); periodic jobs count too.",
            ["frontdesk_job_kind", "frontdesk_job_outcome"],
        )
        self.job_duration = _prom.Histogram(
            "frontdesk_job_duration_seconds",
            "Seconds per run of a background job, by kind and outcome.",
            ["frontdesk_job_kind", "frontdesk_job_outcome"],
            buckets=DURATION_BUCKETS,
        )
        self.rate_limited = _prom.Counter(
            "frontdesk_rate_limited_requests",
            "Requests refused with 429 by the per-user rate limit.",
        )
        self.turns_refused = _prom.Counter(
            "frontdesk_turns_refused",
            "Turns refused with 503 before they started: the worker ran as many turns as"
            " it may (the service's admission limit) for the whole queue time; by route"
            " (json, stream, edit, regenerate).",
            ["frontdesk_route"],
        )
        self.feedback = _prom.Counter(
            "frontdesk_feedback",
            "Customers' ratings of bot answers (1-5; thumbs up is 5, down is 1), by rating"
            " and the prompt variant of the rated answer (empty without variants).",
            ["frontdesk_rating", "frontdesk_variant"],
        )
        self.screen_verdicts = _prom.Counter(
            "frontdesk_screen_verdicts",
            "Verdicts of the screen run before triage (`Orchestrator(screen=...)`), by"
            " action (allow, refuse, handoff) and mode (enforce, shadow).",
            ["frontdesk_screen_action", "frontdesk_screen_mode"],
        )


_instruments: _Instruments | None = _Instruments() if _prom is not None else None


def _child(metric: Any, *labels: str) -> Any:
    """`metric.labels(*labels)`, found in the metric's own table of children when that label
    set was counted before: `labels()` checks its arguments and takes a lock on every call,
    and each turn counts a dozen label sets it counted before. The table is the metric's
    own, so a child it dropped (`remove`, `clear`) is made again by `labels()`, never
    counted into after."""
    child = metric._metrics.get(tuple(map(str, labels)))
    return child if child is not None else metric.labels(*labels)


def available() -> bool:
    """Whether `prometheus_client` is installed (else nothing is counted)."""
    return _instruments is not None


def expert_call(
    *,
    expert: str,
    provider: str,
    request_model: str,
    seconds: float,
    input_tokens: int | None,
    output_tokens: int | None,
    error_type: str = "",
) -> None:
    """Count one expert call: its duration, and its tokens when it got an answer."""
    m = _instruments
    if m is None:
        return
    _child(m.operation_duration, "chat", provider, request_model, expert, error_type).observe(
        seconds
    )
    if input_tokens is not None:
        _child(m.token_usage, "chat", provider, request_model, "input", expert).observe(
            input_tokens
        )
    if output_tokens is not None:
        _child(m.token_usage, "chat", provider, request_model, "output", expert).observe(
            output_tokens
        )


def turn(
    *, category: str, outcome: str, seconds: float, profile: str = "", variant: str = ""
) -> None:
    """Count one turn (by the profile that answered it and its conversation's variant) and
    its duration."""
    m = _instruments
    if m is None:
        return
    _child(m.turns, category, outcome, profile, variant).inc()
    _child(m.turn_duration, outcome).observe(seconds)


def job(*, kind: str, outcome: str, seconds: float) -> None:
    """Count one run of a background job and its duration."""
    m = _instruments
    if m is None:
        return
    _child(m.job_runs, kind, outcome).inc()
    _child(m.job_duration, kind, outcome).observe(seconds)


def first_token(seconds: float) -> None:
    """A streamed turn's time to its first reply text."""
    if _instruments is not None:
        _instruments.first_token.observe(seconds)


def cost(*, expert: str, model: str, usd: float) -> None:
    """Add one attempt's estimated cost (labelled with the variant of the turn it is
    made in: `turn_variant`)."""
    if _instruments is not None and usd > 0:
        _child(_instruments.cost, expert, model, _variant.get()).inc(usd)


def feedback(rating: int, variant: str = "") -> None:
    """Count one customer's rating of a bot answer (of prompt variant `variant`)."""
    if _instruments is not None:
        _instruments.feedback.labels(str(rating), variant).inc()


_variant: ContextVar[str] = ContextVar("frontdesk_metrics_variant", default="")


def turn_variant(variant: str) -> Token[str]:
    """Label the cost of the expert calls made from here on in this context (a turn and
    the tasks it starts) with the conversation's prompt variant; `reset_variant` ends it.
    Variant names come from `variants=` only, so the label's values stay few."""
    return _variant.set(variant)


def reset_variant(token: Token[str]) -> None:
    """End `turn_variant`'s labelling."""
    _variant.reset(token)


def screen_verdict(*, action: str, mode: str) -> None:
    """Count one verdict of the screen before triage."""
    if _instruments is not None:
        _instruments.screen_verdicts.labels(action, mode).inc()


def rate_limited() -> None:
    """Count one request refused by the rate limit."""
    if _instruments is not None:
        _instruments.rate_limited.inc()


def turn_refused(route: str) -> None:
    """Count one turn refused by the service's admission limit (nothing was stored)."""
    if _instruments is not None:
        _instruments.turns_refused.labels(route).inc()


@dataclass(frozen=True, kw_only=True)
class OperationsSnapshot:
    """What a scrape reads from the database (the same from every worker)."""

    handoff_queue_length: int
    """Open hand-offs: conversations a person has."""
    handoff_longest_wait_seconds: float
    """The longest a user of an open hand-off has waited for a person's answer."""
    jobs_pending: int | None = None
    """Background jobs not done yet (`None`: this store keeps no jobs)."""
    jobs_failed: int | None = None
    """Background jobs that failed for good (`None`: this store keeps no jobs)."""
    conversations: Mapping[str, int] | None = None
    """Conversations by resolution (`open`, `resolved`, ...; `None`: not read)."""


if _prom is not None:

    class _Snapshot(Collector):
        """The snapshot's gauges, for one scrape."""

        def __init__(self, snapshot: OperationsSnapshot | None) -> None:
            self.snapshot = snapshot

        def collect(self) -> Iterator[Any]:
            s = self.snapshot
            up = GaugeMetricFamily(
                "frontdesk_store_up", "1 when the scrape could read the database, else 0."
            )
            up.add_metric([], 0.0 if s is None else 1.0)
            yield up
            if s is None:
                return
            gauges: Sequence[tuple[str, str, float | None]] = (
                (
                    "frontdesk_handoff_queue_length",
                    "Conversations handed to a person and not handed back.",
                    s.handoff_queue_length,
                ),
                (
                    "frontdesk_handoff_longest_wait_seconds",
                    "The longest a user of an open hand-off has waited for a person.",
                    s.handoff_longest_wait_seconds,
                ),
                ("frontdesk_jobs_pending", "Background jobs not done yet.", s.jobs_pending),
                ("frontdesk_jobs_failed", "Background jobs that failed for good.", s.jobs_failed),
            )
            for name, doc, value in gauges:
                if value is not None:
                    yield GaugeMetricFamily(name, doc, value=float(value))
            if s.conversations is not None:
                by = GaugeMetricFamily(
                    "frontdesk_conversations_total",
                    "Conversations by resolution (open, resolved, assumed_resolved,"
                    " handed_off, abandoned), as the database holds them now.",
                    labels=["resolution"],
                )
                for resolution, count in sorted(s.conversations.items()):
                    by.add_metric([resolution], float(count))
                yield by


def exposition(snapshot: OperationsSnapshot | None) -> bytes:
    """The metrics in the Prometheus text format: this process's (or, in multiprocess mode,
    every worker's) counters and histograms, then `snapshot`'s gauges.

    Args:
        snapshot: What the scrape read from the database; `None` when it could not
            (`frontdesk_store_up` is then 0).

    Raises:
        RuntimeError: `prometheus_client` is not installed.
    """
    if _prom is None:
        raise RuntimeError("metrics need prometheus_client: pip install 'frontdesk[serve]'")
    if os.environ.get(MULTIPROCESS_ENV):
        from prometheus_client import multiprocess

        counted = _prom.CollectorRegistry()
        multiprocess.MultiProcessCollector(counted)  # type: ignore[no-untyped-call]
    else:
        counted = _prom.REGISTRY
    read = _prom.CollectorRegistry()
    read.register(_Snapshot(snapshot))
    return _prom.generate_latest(counted) + _prom.generate_latest(read)
