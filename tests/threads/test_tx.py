"""`frontdesk._driver.tx`: a transaction is run again after a transient failure, a bounded number of
times; anything else fails at once as a typed store error."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver.tx import run_sync_tx
from frontdesk.db import create_engine, dispose_engine
from frontdesk.errors import StoreError, StoreUnavailable

pytestmark = pytest.mark.anyio


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """A SQLite file (the failures below are raised by the work itself)."""
    engine = create_engine(f"sqlite:///{tmp_path / 'tx.db'}")
    try:
        yield engine
    finally:
        await dispose_engine(engine)


def failing(times: int, error: Exception, calls: list[int]) -> Callable[[Connection], int]:
    """Work that raises `error` on its first `times` calls, then returns the call count."""

    def work(conn: Connection) -> int:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return len(calls)

    return work


LOCKED = OperationalError("BEGIN IMMEDIATE", None, sqlite3.OperationalError("database is locked"))


@pytest.mark.parametrize("readonly", [False, True])
async def test_a_transient_failure_is_retried(engine: AsyncEngine, readonly: bool) -> None:
    calls: list[int] = []
    work = failing(2, LOCKED, calls)
    assert await run_sync_tx(engine, work, readonly=readonly) == 3


async def test_retries_are_bounded(engine: AsyncEngine) -> None:
    calls: list[int] = []
    with pytest.raises(StoreUnavailable, match="after 3 attempts"):
        await run_sync_tx(engine, failing(99, LOCKED, calls), attempts=3)
    assert len(calls) == 3


async def test_any_other_failure_is_not_retried(engine: AsyncEngine) -> None:
    calls: list[int] = []
    duplicate = IntegrityError("INSERT", None, sqlite3.IntegrityError("UNIQUE constraint"))
    with pytest.raises(StoreError, match="IntegrityError") as caught:
        await run_sync_tx(engine, failing(99, duplicate, calls))
    assert not isinstance(caught.value, StoreUnavailable)
    assert len(calls) == 1
