"""Admission control: how many turns one worker runs at once, and a quick 503 past that.

Every turn takes database connections from its worker's pool (its start, its outcome, its
finish; a memory lookup beside the start). A burst of turns larger than the worker can
serve queued for the pool, and past the pool's timeout (30 s) each was answered 503 after
all that wait. Here a turn waits for a place among `max_turns` turns in flight for at most
`queue_seconds` (behind at most `max_turns` others), and is otherwise refused with
`ServiceBusy` (503, `Retry-After`) before anything of it is stored: the client sends the
same message again, with the same Idempotency-Key, and it runs once. Only the routes that
run a turn are limited: reads, live events and operator routes never wait here.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk import metrics
from frontdesk.errors import ConfigError, ServiceBusy

log = structlog.get_logger("frontdesk.service")

DEFAULT_QUEUE_SECONDS = 2.0
"""How long a turn over the limit waits for a place before it is refused: long enough to
ride out a short burst, far below the pool's 30 s."""
TURNS_PER_CONNECTION = 2
"""The default limit is this many turns per connection of the store's pool: a turn holds a
connection only at moments, never during a model call, so two turns per connection keep
the pool busy without a queue for it that could reach its timeout."""
LOG_EVERY_SECONDS = 1.0
"""A burst of refusals is logged as one line a second (`refused`: how many since the last
line), not one each: a line per refusal cost a third of the refusal's CPU."""
FALLBACK_CONNECTIONS = 15
"""A pool that does not say its size is taken as SQLAlchemy's default (5 + 10 overflow)."""


@dataclass(frozen=True, kw_only=True)
class Admission:
    """How many turns one worker (process) runs at once.

    Args:
        max_turns: Turns in flight at most; `None`: `TURNS_PER_CONNECTION` per connection
            of the store's pool (its size and overflow: 30 for the default 5 + 10).
        queue_seconds: How long a turn over the limit waits for a place before it is
            answered 503 (0: at once).
    """

    max_turns: int | None = None
    queue_seconds: float = DEFAULT_QUEUE_SECONDS

    def __post_init__(self) -> None:
        turns = self.max_turns
        if turns is not None and (isinstance(turns, bool) or not isinstance(turns, int)):
            raise ConfigError(f"max_turns must be a whole number or None, got {turns!r}")
        if turns is not None and turns < 1:
            raise ConfigError(f"max_turns must be at least 1, got {turns}")
        if not 0 <= self.queue_seconds <= 60:
            raise ConfigError(f"turn queue time must be 0 to 60 seconds, got {self.queue_seconds}")

    def limit_for(self, engine: AsyncEngine) -> int:
        """`max_turns`, or the default for the pool of `engine`."""
        if self.max_turns is not None:
            return self.max_turns
        return TURNS_PER_CONNECTION * pool_connections(engine)


def pool_connections(engine: AsyncEngine) -> int:
    """How many connections `engine`'s pool opens at most (its size and overflow)."""
    pool = engine.pool
    size, overflow = getattr(pool, "size", None), getattr(pool, "_max_overflow", None)
    if not callable(size) or not isinstance(overflow, int):
        return FALLBACK_CONNECTIONS
    total = int(size()) + max(0, overflow)
    return total if total > 0 else FALLBACK_CONNECTIONS


class TurnGate:
    """At most `max_turns` turns in flight in this process; a turn waits for a place for
    at most `queue_seconds`, else `ServiceBusy`. At most `max_turns` turns wait: one more
    than that is refused at once (a burst far past the limit gets its 503s without delay)."""

    def __init__(self, max_turns: int, queue_seconds: float) -> None:
        self.max_turns = max_turns
        self.queue_seconds = queue_seconds
        self.in_flight = 0
        self.waiting = 0
        self._places = asyncio.Semaphore(max_turns)
        self._unlogged = 0
        self._logged_at = -math.inf

    @property
    def retry_after(self) -> int:
        """The whole seconds a refused client is told to wait (`Retry-After`)."""
        return max(1, math.ceil(self.queue_seconds))

    async def admit(self, route: str) -> None:
        """Take a place, waiting for one at most `queue_seconds`; `release` gives it back.

        Raises:
            ServiceBusy: no place came free in time (nothing was started).
        """
        if self._places.locked() and (
            self.queue_seconds <= 0 or self.waiting >= self.max_turns
        ):  # No wait can help: refused at once, not after the queue time.
            self._refuse(route, 0.0)
        started = time.monotonic()
        self.waiting += 1
        try:
            async with asyncio.timeout(self.queue_seconds or None):
                await self._places.acquire()
        except TimeoutError:
            self._refuse(route, time.monotonic() - started)
        finally:
            self.waiting -= 1
        self.in_flight += 1

    def release(self) -> None:
        """Give a place back (once per `admit` that returned)."""
        self.in_flight -= 1
        self._places.release()

    @asynccontextmanager
    async def place(self, route: str) -> AsyncIterator[None]:
        """A place for the block (a turn answered as JSON)."""
        await self.admit(route)
        try:
            yield
        finally:
            self.release()

    def _refuse(self, route: str, waited: float) -> None:
        metrics.turn_refused(route)
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_SECONDS:
            log.warning(
                "turn.refused",
                route=route,
                refused=self._unlogged,
                in_flight=self.in_flight,
                waiting=self.waiting,
                max_turns=self.max_turns,
                waited_seconds=round(waited, 3),
            )
            self._unlogged, self._logged_at = 0, now
        raise ServiceBusy(
            f"this server is answering as many messages as it can ({self.max_turns} at once)"
            " and none finished in time: your message was not taken and nothing of it is"
            f" stored; send it again, with the same Idempotency-Key, after {self.retry_after}"
            " seconds (Retry-After)",
            retry_after=self.retry_after,
        )
