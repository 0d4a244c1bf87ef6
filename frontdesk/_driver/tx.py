"""Transactions with a bounded retry of transient database failures.

PostgreSQL may abort a transaction with a serialisation failure (40001) or a deadlock
(40P01), and any server may drop a connection; such a transaction is safe to run again
from the start. Anything else is a bug or a bad request and is not retried.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import structlog
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from frontdesk.db import read_transaction, run_alone, run_read, run_write, write_slot
from frontdesk.errors import StoreError, StoreUnavailable

T = TypeVar("T")

ATTEMPTS = 4
"""Attempts per transaction (the first try plus three retries)."""

_TRANSIENT_SQLSTATES = frozenset({"40001", "40P01", "57P01", "08000", "08003", "08006"})
_log = structlog.get_logger("threads.store")


def is_transient(error: BaseException) -> bool:
    """Whether running the whole transaction again may succeed."""
    if not isinstance(error, DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    sqlstate = getattr(error.orig, "sqlstate", None) or getattr(error.orig, "pgcode", None)
    if sqlstate in _TRANSIENT_SQLSTATES:
        return True
    # SQLite's busy timeout ran out; BEGIN IMMEDIATE makes this rare but not impossible.
    return "database is locked" in str(error.orig)


def _retrying(attempts: int) -> AsyncRetrying:
    return AsyncRetrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_attempt(attempts),
        wait=wait_exponential_jitter(multiplier=0.02, jitter=0.05, max=0.5),
        reraise=True,
        before_sleep=lambda state: _log.warning(
            "store.retry",
            attempt=state.attempt_number,
            error=type(state.outcome.exception()).__name__ if state.outcome else None,
        ),
    )


def _translated(error: SQLAlchemyError, attempts: int) -> StoreError:
    if not isinstance(error, DBAPIError):
        return StoreError(f"database error: {error}")
    if is_transient(error):
        return StoreUnavailable(
            f"the database kept failing transiently after {attempts} attempts "
            f"({type(error.orig).__name__}); retry the operation"
        )
    return StoreError(f"database error: {type(error.orig).__name__}: {error.orig}")


async def _attempts(once: Callable[[], Awaitable[T]], attempts: int) -> T:
    """Run `once`, and again after a transient failure, `attempts` times at most.

    The first try runs bare: a transaction almost never fails, and tenacity's loop costs
    about 20 us a transaction (a few per cent of a turn's CPU). Only a transient failure
    enters it, after the policy's first wait.

    Raises:
        StoreUnavailable: a transient failure outlived the retries.
        StoreError: any other database failure.
    """
    try:
        try:
            return await once()
        except SQLAlchemyError as e:
            if attempts <= 1 or not is_transient(e):
                raise
            _log.warning("store.retry", attempt=1, error=type(e).__name__)
        await anyio.sleep(random.uniform(0.02, 0.07))  # The policy's first wait, jittered.
        async for attempt in _retrying(attempts - 1):
            with attempt:
                return await once()
    except SQLAlchemyError as e:
        raise _translated(e, attempts) from e
    raise AssertionError("unreachable: tenacity either returns or raises")


async def run_tx(
    engine: AsyncEngine,
    work: Callable[[AsyncConnection], Awaitable[T]],
    *,
    readonly: bool = False,
    attempts: int = ATTEMPTS,
) -> T:
    """Run `work` in one transaction, retrying transient failures a bounded number of times.

    Raises:
        StoreUnavailable: a transient failure outlived the retries.
        StoreError: any other database failure.
    """

    async def once() -> T:
        if readonly:
            async with read_transaction(engine) as conn:
                return await work(conn)
        async with write_slot(engine), engine.connect() as conn, conn.begin():
            return await work(conn)

    return await _attempts(once, attempts)


async def run_sync_tx(
    engine: AsyncEngine,
    work: Callable[[Connection], T],
    *,
    readonly: bool = False,
    alone: bool = False,
    attempts: int = ATTEMPTS,
) -> T:
    """`run_tx` for SQL written sync: a write or a read runs in one hop
    (`frontdesk.db.run_write`, `frontdesk.db.run_read`); with `alone`, `work` is one
    statement, its own transaction (`frontdesk.db.run_alone`).

    Raises:
        StoreUnavailable: a transient failure outlived the retries.
        StoreError: any other database failure.
    """
    if readonly:
        return await _attempts(lambda: run_read(engine, work), attempts)
    if alone:
        return await _attempts(lambda: run_alone(engine, work), attempts)
    return await _attempts(lambda: run_write(engine, work), attempts)
