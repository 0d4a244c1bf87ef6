"""The one retry policy in force for real providers (the SDKs' own retries are off).

Adapters make one HTTP attempt at a time and report it as an `AttemptSuccess` or raise an
`AttemptFailure` that says whether it may be retried and after how long the provider asked
us to wait. `RetryRunner` decides (attempt budget, total seconds, backoff with jitter,
`retry-after` cap), reports every attempt to the attempt observer and to structlog, and
drives the loop with tenacity. One runner spans one expert call, so a validation re-ask
spends from the same attempt budget as the HTTP retries.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import structlog
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt

from frontdesk.errors import ConfigError, ModelError, RateLimited
from frontdesk.experts.providers.base import AttemptEvent, Usage, report_attempt

T = TypeVar("T")

Sleep = Callable[[float], Awaitable[None]]
"""Waits a number of seconds; injectable so tests use a fake clock."""
Clock = Callable[[], float]
"""Monotonic seconds; injectable together with `Sleep`."""

log = structlog.get_logger("frontdesk.providers")


@dataclass(frozen=True, kw_only=True)
class RetryConfig:
    """Bounds of the retry policy for one expert call.

    Attributes:
        max_attempts: HTTP requests in all (first try, retries and validation re-asks).
        total_seconds: Wall-clock budget for the whole call; no wait may run past it.
        backoff_base: First backoff in seconds; doubles per attempt.
        backoff_max: Largest backoff in seconds.
        jitter: Fraction of each backoff that is random (0 = none, 1 = full jitter).
        retry_after_cap: Longest `retry-after` honoured; a longer one gives up at once.
    """

    max_attempts: int = 4
    total_seconds: float = 60.0
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    jitter: float = 0.5
    retry_after_cap: float = 20.0

    def __post_init__(self) -> None:
        problems = []
        if self.max_attempts < 1:
            problems.append(f"max_attempts must be >= 1 (got {self.max_attempts})")
        if self.total_seconds <= 0:
            problems.append(f"total_seconds must be > 0 (got {self.total_seconds})")
        if self.backoff_base < 0 or self.backoff_max < self.backoff_base:
            problems.append("need 0 <= backoff_base <= backoff_max")
        if not 0 <= self.jitter <= 1:
            problems.append(f"jitter must be within [0, 1] (got {self.jitter})")
        if self.retry_after_cap < 0:
            problems.append(f"retry_after_cap must be >= 0 (got {self.retry_after_cap})")
        if problems:
            raise ConfigError("bad RetryConfig: " + "; ".join(problems))


@dataclass(kw_only=True)
class AttemptRecord:
    """What one HTTP attempt sent and got back, for the attempt event."""

    request_body: Any
    response_body: Any = None
    status_code: int | None = None
    provider_request_id: str | None = None
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    first_token_ms: float | None = None
    """For a streamed attempt: milliseconds from sending to its first text delta."""


@dataclass(kw_only=True)
class AttemptSuccess(Generic[T]):
    """A successful attempt: the parsed value and its record."""

    value: T
    record: AttemptRecord


class AttemptFailure(Exception):
    """A failed attempt, carrying the typed error to raise if it is not retried.

    Args:
        error: The `ModelError` the caller gets if this is the last attempt.
        record: What was sent and received.
        retryable: Whether the policy may try again.
        retry_after: Seconds the provider asked us to wait, if it said.
        invalid_output: The answer failed validation (re-asked by the adapter, not here).
    """

    def __init__(
        self,
        error: ModelError,
        record: AttemptRecord,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        invalid_output: bool = False,
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.record = record
        self.retryable = retryable
        self.retry_after = retry_after
        self.invalid_output = invalid_output
        self.planned_wait: float | None = None


class RetryRunner:
    """Runs attempts for one expert call under one `RetryConfig`.

    Args:
        config: The policy's bounds.
        expert: Which expert is calling (for the events).
        model: The model spec (for the events and errors).
        metadata: Correlation ids copied onto every event.
        sleep: Async sleep; defaults to `asyncio.sleep`.
        clock: Monotonic clock; defaults to `time.monotonic`.
        rng: Random source for jitter.
    """

    def __init__(
        self,
        config: RetryConfig,
        *,
        expert: str,
        model: str,
        metadata: Mapping[str, str] | None = None,
        sleep: Sleep | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.expert = expert
        self.model = model
        self.metadata = dict(metadata or {})
        self._sleep: Sleep = sleep or asyncio.sleep
        self._clock: Clock = clock or time.monotonic
        self._rng = rng or random.Random()
        self._start = self._clock()
        self._extra = 0.0
        self.attempts = 0
        self.usage = Usage()
        self.in_flight: AttemptRecord | None = None
        """The record of the attempt in progress, when the adapter shares it (streams do),
        so that an attempt cancelled midway is reported with what it sent and showed."""

    @property
    def attempts_left(self) -> int:
        """HTTP attempts still allowed in this call."""
        return self.config.max_attempts - self.attempts

    @property
    def elapsed(self) -> float:
        """Seconds since the call began."""
        return self._clock() - self._start

    def extend(self, seconds: float) -> None:
        """Grow the call's total budget by `seconds` (a re-ask's own time), never past twice
        `total_seconds` in all."""
        room = self.config.total_seconds - self._extra
        self._extra += max(0.0, min(seconds, room))

    def at_least(self, seconds: float) -> None:
        """Make the call's total budget at least `seconds` (one attempt's timeout: a slow
        self-hosted server given `timeout=120` gets its 120 s, not the 60 s default)."""
        self._extra = max(self._extra, seconds - self.config.total_seconds)

    @property
    def remaining_seconds(self) -> float:
        """Seconds left of the call's total budget (grown by `extend`)."""
        return self.config.total_seconds + self._extra - (self._clock() - self._start)

    def attempt_timeout(self, per_attempt: float) -> float:
        """The timeout for the next attempt: the setting, but never past the budget."""
        return max(0.001, min(per_attempt, self.remaining_seconds))

    async def run(self, send: Callable[[int], Awaitable[AttemptSuccess[T]]]) -> T:
        """Call `send(attempt_number)` until it succeeds or the policy gives up.

        Raises:
            AttemptFailure: the last failure, with its typed `error` (attempts filled in).
        """
        if self.attempts_left <= 0:
            raise RuntimeError("RetryRunner.run called with no attempts left")
        retrying = AsyncRetrying(
            sleep=self._sleep,
            stop=stop_after_attempt(self.attempts_left),
            wait=_planned_wait,
            retry=retry_if_exception(_will_retry),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                return await self._one(send)
        raise AssertionError("unreachable: tenacity either returns or reraises")  # pragma: no cover

    async def _one(self, send: Callable[[int], Awaitable[AttemptSuccess[T]]]) -> T:
        self.in_flight = None
        self.attempts += 1
        number = self.attempts
        started = time.perf_counter()
        try:
            success = await send(number)
        except asyncio.CancelledError:
            # The caller stopped waiting (a stream's consumer went away, a deadline): the
            # attempt still cost tokens, so it is reported, as abandoned, never retried.
            latency = (time.perf_counter() - started) * 1000
            abandoned = ModelError(
                "the attempt was cancelled: the caller stopped waiting (a turn deadline, or"
                " a stream whose reader went away)",
                model=self.model,
            )
            record = self.in_flight or AttemptRecord(request_body=None)
            self._report(number, latency, record, abandoned, None)
            raise
        except AttemptFailure as failure:
            latency = (time.perf_counter() - started) * 1000
            failure.planned_wait = self._plan(failure)
            failure.error = self._final_error(failure)
            failure.error.attempts = number
            failure.error.model = failure.error.model or self.model
            self._report(number, latency, failure.record, failure.error, failure.planned_wait)
            raise
        latency = (time.perf_counter() - started) * 1000
        self._report(number, latency, success.record, None, None)
        return success.value

    def _plan(self, failure: AttemptFailure) -> float | None:
        """Seconds to wait before retrying, or `None` to give up now."""
        if not failure.retryable or self.attempts >= self.config.max_attempts:
            return None
        if failure.retry_after is not None:
            if failure.retry_after > self.config.retry_after_cap:
                return None
            wait = max(0.0, failure.retry_after)
        else:
            exp = self.config.backoff_base * 2 ** (self.attempts - 1)
            backoff = min(self.config.backoff_max, exp)
            wait = backoff * (1 - self.config.jitter * self._rng.random())
        if wait >= self.remaining_seconds:
            return None
        return wait

    def _final_error(self, failure: AttemptFailure) -> ModelError:
        """Give up early with `RateLimited` when the provider's wait exceeds our bounds."""
        error = failure.error
        if (
            failure.planned_wait is None
            and failure.retryable
            and failure.retry_after is not None
            and isinstance(error, RateLimited)
        ):
            error.retry_after = failure.retry_after
            error.args = (
                f"{error.args[0]} (the provider asks to wait {failure.retry_after:g}s, beyond"
                f" the retry budget: cap {self.config.retry_after_cap:g}s,"
                f" {max(0.0, self.remaining_seconds):.1f}s left)",
            )
        return error

    def _report(
        self,
        number: int,
        latency_ms: float,
        record: AttemptRecord,
        error: ModelError | None,
        planned_wait: float | None,
    ) -> None:
        self.usage = self.usage + record.usage
        error_text = f"{type(error).__name__}: {error}" if error is not None else None
        will_retry = planned_wait is not None
        report_attempt(
            AttemptEvent(
                expert=self.expert,
                model=self.model,
                attempt=number,
                latency_ms=latency_ms,
                request_body=record.request_body,
                response_body=record.response_body,
                usage=record.usage,
                status_code=record.status_code,
                provider_request_id=record.provider_request_id,
                stop_reason=record.stop_reason,
                error=error_text,
                will_retry=will_retry,
                metadata=self.metadata,
                first_token_ms=record.first_token_ms,
            )
        )
        log_method = log.info if error is None else log.warning
        log_method(
            "model_attempt",
            expert=self.expert,
            model=self.model,
            attempt=number,
            status=record.status_code,
            request_id=record.provider_request_id,
            latency_ms=round(latency_ms, 1),
            first_token_ms=(
                round(record.first_token_ms, 1) if record.first_token_ms is not None else None
            ),
            stop_reason=record.stop_reason,
            error_class=type(error).__name__ if error is not None else None,
            will_retry=will_retry,
            retry_in_s=round(planned_wait, 3) if planned_wait is not None else None,
            meta=self.metadata,
        )


def _will_retry(exc: BaseException) -> bool:
    return isinstance(exc, AttemptFailure) and exc.planned_wait is not None


def _planned_wait(state: RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome is not None else None
    if isinstance(exc, AttemptFailure) and exc.planned_wait is not None:
        return exc.planned_wait
    return 0.0
