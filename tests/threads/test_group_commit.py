"""Group commit of `frontdesk.db.run_write` on SQLite.

The writes queued while the database's writer thread is busy run next in one transaction,
a savepoint each, then one COMMIT. Each test holds the thread with a first write until the
others are queued, so that they form one batch. SQLite only: PostgreSQL writes are not
queued (each runs in its own transaction of the async engine).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver import writer
from frontdesk.db import create_engine, dispose_engine, run_write

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def on_the_writer_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write queues for the writer thread (as under load), none takes the fast path
    an idle process takes (`_driver.writer._Inline`, tests/threads/test_fast_writes.py)."""
    monkeypatch.setattr(writer, "_idle", lambda *_: False)


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """A SQLite file with a parent/child pair of tables (a foreign key between them)."""
    engine = create_engine(f"sqlite:///{tmp_path / 'group.db'}")
    async with engine.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE parent (id INTEGER PRIMARY KEY)"))
        await conn.execute(
            sa.text("CREATE TABLE child (id INTEGER PRIMARY KEY, p INTEGER REFERENCES parent(id))")
        )
    try:
        yield engine
    finally:
        await dispose_engine(engine)


def insert_parent(n: int, fail: bool = False) -> Callable[[Connection], Any]:
    """A write of parent row `n` that returns its transaction (or raises after writing)."""

    def work(conn: Connection) -> Any:
        conn.execute(sa.text("INSERT INTO parent (id) VALUES (:n)"), {"n": n})
        if fail:
            raise RuntimeError(f"job {n} refused")
        return conn.get_transaction()

    return work


async def in_one_batch(
    engine: AsyncEngine, works: list[Callable[[Connection], Any]]
) -> tuple[Any, list[asyncio.Task[Any]]]:
    """Queue `works` while a first write holds the writer thread, then let them run.

    Returns the first write's transaction and the callers' tasks (finished).
    """
    gate, started = threading.Event(), threading.Event()

    def hold(conn: Connection) -> Any:
        started.set()
        assert gate.wait(5), "the test released the writer thread"
        return conn.get_transaction()

    first = asyncio.ensure_future(run_write(engine, hold))
    await anyio.to_thread.run_sync(started.wait)
    tasks = [asyncio.ensure_future(run_write(engine, work)) for work in works]
    for _ in range(3):
        await asyncio.sleep(0)  # Each task queues its write, then waits for it.
    gate.set()
    held = await first
    await asyncio.wait(tasks)
    return held, tasks


async def parents(engine: AsyncEngine) -> list[int]:
    """The parent ids committed (read through another connection)."""
    async with engine.connect() as conn:
        return list((await conn.execute(sa.text("SELECT id FROM parent ORDER BY id"))).scalars())


async def test_queued_writes_commit_together_and_a_failing_one_alone_is_undone(
    engine: AsyncEngine,
) -> None:
    held, tasks = await in_one_batch(
        engine, [insert_parent(1), insert_parent(2, fail=True), insert_parent(3)]
    )
    one, three = tasks[0].result(), tasks[2].result()
    assert one is three  # One transaction for the whole queue...
    assert one is not held  # ...after the one that was running when they came.
    with pytest.raises(RuntimeError, match="job 2 refused"):
        tasks[1].result()
    assert await parents(engine) == [1, 3]  # Job 2's own insert rolled back, alone.


async def test_a_database_error_reaches_its_own_caller_only(engine: AsyncEngine) -> None:
    await run_write(engine, insert_parent(7))
    _, tasks = await in_one_batch(engine, [insert_parent(8), insert_parent(7), insert_parent(9)])
    with pytest.raises(IntegrityError):  # Still SQLAlchemy's typed error, for the retries.
        tasks[1].result()
    assert tasks[0].exception() is None and tasks[2].exception() is None
    assert await parents(engine) == [7, 8, 9]


async def test_no_caller_hears_of_its_write_when_the_commit_fails(engine: AsyncEngine) -> None:
    def orphan(conn: Connection) -> None:
        # A deferred foreign key is checked at COMMIT, so the whole batch's COMMIT fails.
        conn.execute(sa.text("PRAGMA defer_foreign_keys = ON"))
        conn.execute(sa.text("INSERT INTO child (id, p) VALUES (1, 404)"))

    _, tasks = await in_one_batch(engine, [insert_parent(1), orphan, insert_parent(2)])
    for task in tasks:
        with pytest.raises(IntegrityError, match="FOREIGN KEY"):
            task.result()
    assert await parents(engine) == []
    await run_write(engine, insert_parent(3))  # The writer carries on with the next batch.
    assert await parents(engine) == [3]


async def test_a_transaction_ended_by_sqlite_fails_the_jobs_before_and_reruns_the_rest(
    engine: AsyncEngine,
) -> None:
    def ends_the_transaction(conn: Connection) -> None:
        # What SQLite does itself after some I/O and busy errors: the whole transaction is
        # rolled back, not just the statement.
        conn.exec_driver_sql("ROLLBACK")
        raise RuntimeError("the transaction is gone")

    _, tasks = await in_one_batch(
        engine, [insert_parent(1), ends_the_transaction, insert_parent(2)]
    )
    for task in tasks[:2]:
        with pytest.raises(RuntimeError, match="the transaction is gone"):
            task.result()
    assert tasks[2].exception() is None
    assert await parents(engine) == [2]


async def test_a_caller_cancelled_while_queued_withdraws_its_write(engine: AsyncEngine) -> None:
    gate, started = threading.Event(), threading.Event()

    def hold(conn: Connection) -> None:
        started.set()
        assert gate.wait(5)

    first = asyncio.ensure_future(run_write(engine, hold))
    await anyio.to_thread.run_sync(started.wait)
    queued = asyncio.ensure_future(run_write(engine, insert_parent(1)))
    kept = asyncio.ensure_future(run_write(engine, insert_parent(2)))
    await asyncio.sleep(0)
    queued.cancel()
    with pytest.raises(asyncio.CancelledError):
        await queued  # At once: its write had not started.
    gate.set()
    await first
    await kept
    assert await parents(engine) == [2]


async def test_writes_from_many_tasks_all_land(engine: AsyncEngine) -> None:
    async def write(n: int) -> None:
        await run_write(engine, insert_parent(n))

    calls: list[Awaitable[None]] = [write(n) for n in range(200)]
    await asyncio.gather(*calls)
    assert await parents(engine) == list(range(200))


async def test_closing_the_engine_lets_the_queued_writes_finish(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    tasks = [asyncio.ensure_future(run_write(engine, insert_parent(n))) for n in range(5)]
    await asyncio.sleep(0)  # Queued.
    await dispose_engine(engine)
    await asyncio.gather(*tasks)
    reopened = create_engine(f"sqlite:///{tmp_path / 'group.db'}")
    try:
        assert await parents(reopened) == list(range(5))
    finally:
        await dispose_engine(reopened)
