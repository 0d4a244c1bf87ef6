"""Per-user rate limits (a token bucket, in process or in Redis) and the request body limit.

A bucket holds up to `burst` tokens and refills at `rate` tokens a second; each request
takes one. An empty bucket answers with the seconds until the next token (the
`Retry-After` of the 429). `TokenBucket` counts per process (each uvicorn worker has its
own); `RedisTokenBucket` counts in Redis, so every worker and host shares one budget.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from frontdesk.errors import ConfigError

log = structlog.get_logger("frontdesk.service")

DEFAULT_RATE_LIMIT = "240/minute"
"""Four requests a second in bursts of up to 240: room for the pages' polling (about one
request a second while a person has a conversation) and then some."""
DEFAULT_MAX_BODY_BYTES = 256 * 1024
"""Large enough for the longest user message (16,000 characters of 4-byte UTF-8)."""

_PERIODS = {"s": 1.0, "second": 1.0, "m": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]*)\s*$")


@dataclass(frozen=True)
class RateLimit:
    """`requests` per `per` seconds for each user, in bursts of up to `requests`."""

    requests: int
    per: float

    @property
    def rate(self) -> float:
        """Tokens added per second."""
        return self.requests / self.per

    @classmethod
    def parse(cls, text: str) -> RateLimit | None:
        """`"120/minute"`, `"10/s"`, `"500/3600"`, `"30/10s"`; `"off"` or `"0"` is no limit.

        Raises:
            ConfigError: anything else.
        """
        if text.strip().lower() in ("off", "0", "none", ""):
            return None
        match = _RATE.match(text.lower())
        unit = match.group(3) if match else ""
        if match is None or (unit and unit not in _PERIODS) or not (match.group(2) or unit):
            raise ConfigError(
                f"FRONTDESK_RATE_LIMIT={text!r}: expected requests per period, e.g. "
                "'120/minute', '10/second', '500/3600' (seconds) or 'off'"
            )
        count = float(match.group(2)) if match.group(2) else 1.0
        per = count * (_PERIODS[unit] if unit else 1.0)
        requests = int(match.group(1))
        if requests <= 0 or per <= 0:
            raise ConfigError(f"FRONTDESK_RATE_LIMIT={text!r}: both numbers must be above 0")
        return cls(requests=requests, per=per)


class RateLimiter(Protocol):
    """Takes one token for `key`."""

    async def acquire(self, key: str) -> float:
        """0.0 when the request may go ahead, else the seconds to wait for a token."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class TokenBucket:
    """An in-process token bucket per key (per uvicorn worker)."""

    def __init__(self, limit: RateLimit, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self._clock = clock
        self._buckets: MutableMapping[str, tuple[float, float]] = {}  # key -> (tokens, at)

    async def acquire(self, key: str) -> float:
        """0.0 and one token taken, or the seconds until a token is there."""
        now = self._clock()
        burst, rate = float(self.limit.requests), self.limit.rate
        tokens, at = self._buckets.get(key, (burst, now))
        tokens = min(burst, tokens + (now - at) * rate)
        if tokens >= 1.0:
            self._buckets[key] = (tokens - 1.0, now)
            self._prune(now)
            return 0.0
        self._buckets[key] = (tokens, now)
        return (1.0 - tokens) / rate

    def _prune(self, now: float) -> None:
        """Forget buckets that have refilled (they are the same as no bucket)."""
        if len(self._buckets) < 10_000:
            return
        full = self.limit.per
        for key in [k for k, (_, at) in self._buckets.items() if now - at >= full]:
            del self._buckets[key]

    async def aclose(self) -> None:
        """Nothing to release."""


# One atomic step on the server: refill by elapsed time (Redis's own clock, so the hosts'
# clocks need not agree), take a token or say how long until one. Floats are returned as
# strings: Redis turns Lua numbers into integers.
_LUA = """
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""


class RedisTokenBucket:
    """The same bucket, kept in Redis (`redis.asyncio`), shared by every worker and host.

    When Redis cannot be reached the request goes ahead (logged as
    `ratelimit.redis_unavailable`): the limit protects the service, it must not stop it.
    """

    def __init__(self, limit: RateLimit, url: str, *, prefix: str = "frontdesk:ratelimit:") -> None:
        try:
            import redis.asyncio as aioredis
        except ImportError:  # pragma: no cover - the message is the point
            raise ConfigError(
                "FRONTDESK_REDIS_URL is set but the redis package is not installed: "
                "pip install 'frontdesk[redis]'"
            ) from None
        self.limit = limit
        self.prefix = prefix
        self._redis: Any = aioredis.Redis.from_url(url, socket_timeout=1.0)
        self._script: Callable[..., Awaitable[Any]] = self._redis.register_script(_LUA)

    async def acquire(self, key: str) -> float:
        """0.0 and one token taken, or the seconds until a token is there."""
        try:
            wait = await self._script(
                keys=[self.prefix + key], args=[self.limit.requests, repr(self.limit.rate)]
            )
        except Exception as e:  # redis.RedisError, OSError: fail open, loudly
            log.warning("ratelimit.redis_unavailable", error=type(e).__name__)
            return 0.0
        return float(wait)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()


def retry_after_header(wait: float) -> str:
    """Whole seconds, rounded up, at least 1 (HTTP's `Retry-After` is an integer)."""
    return str(max(1, math.ceil(wait)))
