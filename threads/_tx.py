"""Transactions with a bounded retry of transient database failures.

PostgreSQL may abort a transaction with a serialisation failure (40001) or a deadlock
(40P01), and any server may drop a connection; such a transaction is safe to run again
from the start. Anything else is a bug or a bad request and is not retried.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from frontdesk.db import write_slot
from threads.errors import StoreError, StoreUnavailable

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
    retrying = AsyncRetrying(
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
    try:
        async for attempt in retrying:
            with attempt:
                if readonly:
                    async with engine.connect() as conn:
                        await conn.execution_options(frontdesk_readonly=True)
                        async with conn.begin():
                            return await work(conn)
                async with write_slot(engine), engine.connect() as conn, conn.begin():
                    return await work(conn)
    except DBAPIError as e:
        if is_transient(e):
            raise StoreUnavailable(
                f"the database kept failing transiently after {attempts} attempts "
                f"({type(e.orig).__name__}); retry the operation"
            ) from e
        raise StoreError(f"database error: {type(e.orig).__name__}: {e.orig}") from e
    except SQLAlchemyError as e:
        raise StoreError(f"database error: {e}") from e
    raise AssertionError("unreachable: tenacity either returns or raises")
