"""The retry policy's pieces: config validation, header parsing, backoff and budget."""

from __future__ import annotations

import email.utils
import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontdesk.errors import ConfigError, ProviderOverloaded, RateLimited
from frontdesk.experts.providers._http import parse_retry_after, redact
from frontdesk.experts.providers._retry import (
    AttemptFailure,
    AttemptRecord,
    AttemptSuccess,
    RetryConfig,
    RetryRunner,
)
from tests.experts.providers.conftest import FakeClock

pytestmark = pytest.mark.anyio


def test_bad_config_lists_every_problem() -> None:
    with pytest.raises(ConfigError) as info:
        RetryConfig(max_attempts=0, total_seconds=0, jitter=2)
    for word in ("max_attempts", "total_seconds", "jitter"):
        assert word in str(info.value)


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    assert parse_retry_after(headers) == seconds


def test_parse_retry_after_http_date() -> None:
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    parsed = parse_retry_after({"retry-after": when})
    assert parsed is not None and 25 <= parsed <= 31


@given(st.dictionaries(st.sampled_from(["retry-after", "retry-after-ms"]), st.text(max_size=40)))
def test_parse_retry_after_never_raises(headers: dict[str, str]) -> None:
    result = parse_retry_after(headers)
    assert result is None or result >= 0


def test_redact_masks_key_fragments() -> None:
    key = "sk-ant-0123456789abcdef"
    body = {"error": {"message": f"bad key {key[:10]}...{key[-8:]}", "list": [key]}}
    assert key[-8:] not in repr(redact(body, key)) and key not in repr(redact(body, key))


def _overloaded(retry_after: float | None = None) -> AttemptFailure:
    return AttemptFailure(
        ProviderOverloaded("down", status_code=529),
        AttemptRecord(request_body={}),
        retryable=True,
        retry_after=retry_after,
    )


async def test_backoff_grows_with_jitter_and_stays_bounded(clock: FakeClock) -> None:
    config = RetryConfig(max_attempts=6, backoff_base=1, backoff_max=4, jitter=0.5)
    runner = RetryRunner(
        config, expert="t", model="m", sleep=clock.sleep, clock=clock.now, rng=random.Random(7)
    )

    async def send(number: int) -> AttemptSuccess[str]:
        raise _overloaded()

    with pytest.raises(AttemptFailure) as info:
        await runner.run(send)
    assert info.value.error.attempts == 6
    caps = [1, 2, 4, 4, 4]
    assert len(clock.sleeps) == 5
    for slept, cap in zip(clock.sleeps, caps, strict=True):
        assert cap * 0.5 <= slept <= cap
    assert len(set(clock.sleeps)) > 1


async def test_budget_stops_before_a_wait_that_would_overrun(clock: FakeClock) -> None:
    config = RetryConfig(total_seconds=3, retry_after_cap=10)
    runner = RetryRunner(config, expert="t", model="m", sleep=clock.sleep, clock=clock.now)
    calls = 0

    async def send(number: int) -> AttemptSuccess[str]:
        nonlocal calls
        calls += 1
        raise AttemptFailure(
            RateLimited("slow", status_code=429),
            AttemptRecord(request_body={}),
            retryable=True,
            retry_after=5,
        )

    with pytest.raises(AttemptFailure) as info:
        await runner.run(send)
    assert calls == 1 and clock.sleeps == []
    assert isinstance(info.value.error, RateLimited) and info.value.error.retry_after == 5
