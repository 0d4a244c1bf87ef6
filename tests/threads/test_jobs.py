"""Job rows (jobs/store.py) on SQLite and PostgreSQL: recorded in the caller's transaction,
listed, retried, cancelled, and (SQLite) claimed one lock at a time, in order."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import Connection

from frontdesk.db import run_write
from frontdesk.jobs import store as jobs
from frontdesk.jobs.store import JobSpec
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ConversationStore]:
    """A store on an empty database of each kind (job counts are per database)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    else:
        url = str(request.getfixturevalue("fresh_pg_url"))
    store = await ConversationStore.open(url)
    try:
        yield store
    finally:
        await store.aclose()


async def _defer(store: ConversationStore, *specs: JobSpec) -> list[int]:
    recorded = await run_write(store.engine, lambda conn: jobs.defer(conn, specs))
    return [job.id for job in recorded]


async def _list(store: ConversationStore, *status: str) -> list[jobs.JobRow]:
    chosen = status or ("todo", "doing", "failed")
    async with store.engine.connect() as conn:
        return await conn.run_sync(lambda c: jobs.list_jobs(c, status=chosen))


async def test_jobs_are_recorded_in_the_callers_transaction_or_not_at_all(
    fresh: ConversationStore,
) -> None:
    class Boom(Exception):
        pass

    def write_then_fail(conn: Connection) -> None:
        jobs.defer(conn, [JobSpec(kind="learn", args={"message_id": "m-1"})])
        raise Boom

    with pytest.raises(Boom):
        await run_write(fresh.engine, write_then_fail)
    assert await _list(fresh) == []
    ids = await _defer(
        fresh,
        JobSpec(kind="learn", args={"message_id": "m-1", "odd": 'a "quoted" \\ {x}'}, lock="u:1"),
        JobSpec(kind="compact", args={"conversation_id": "c-1"}, lock="c:1"),
    )
    listed = await _list(fresh)
    assert [j.id for j in listed] == ids and len(ids) == 2
    first = listed[0].as_json()
    assert first["kind"] == "learn" and first["status"] == "todo" and first["attempts"] == 0
    assert first["key"] == "u:1" and first["args"]["odd"] == 'a "quoted" \\ {x}'


async def test_a_cancelled_job_is_not_listed_as_pending_and_retry_brings_it_back(
    fresh: ConversationStore,
) -> None:
    (job_id,) = await _defer(fresh, JobSpec(kind="learn", args={}))
    assert await run_write(fresh.engine, lambda c: jobs.cancel(c, job_id))
    assert not await run_write(fresh.engine, lambda c: jobs.cancel(c, job_id))  # Not todo now.
    assert await _list(fresh) == []
    assert await run_write(fresh.engine, lambda c: jobs.retry(c, job_id))
    assert [j.status for j in await _list(fresh)] == ["todo"]
    assert not await run_write(fresh.engine, lambda c: jobs.retry(c, job_id))  # Todo already.


async def test_idempotency_keys_are_kept_once(fresh: ConversationStore) -> None:
    def twice(conn: Connection) -> None:
        jobs.mark_done(conn, "learn:m-1")
        jobs.mark_done(conn, "learn:m-1")

    await run_write(fresh.engine, twice)
    async with fresh.engine.connect() as conn:
        assert await conn.run_sync(lambda c: jobs.is_done(c, "learn:m-1"))
        assert not await conn.run_sync(lambda c: jobs.is_done(c, "learn:m-2"))


async def test_the_last_error_is_kept_and_listed(fresh: ConversationStore) -> None:
    (job_id,) = await _defer(fresh, JobSpec(kind="learn", args={}))
    await run_write(fresh.engine, lambda c: jobs.record_error(c, job_id, "first"))
    await run_write(fresh.engine, lambda c: jobs.record_error(c, job_id, "RuntimeError: x"))
    assert [j.last_error for j in await _list(fresh)] == ["RuntimeError: x"]


async def _claim(store: ConversationStore, now: float | None = None) -> jobs.JobRow | None:
    return await run_write(store.engine, lambda c: jobs.claim(c, lease=30.0, now=now))


async def test_one_locks_jobs_are_claimed_one_at_a_time_in_order(
    sqlite_store: ConversationStore,
) -> None:
    a1, b1, a2 = await _defer(
        sqlite_store,
        JobSpec(kind="learn", args={"n": 1}, lock="user:a"),
        JobSpec(kind="learn", args={"n": 2}, lock="user:b"),
        JobSpec(kind="learn", args={"n": 3}, lock="user:a"),
    )
    first, second = await _claim(sqlite_store), await _claim(sqlite_store)
    assert first is not None and second is not None
    assert (first.id, second.id) == (a1, b1)  # a2 waits behind a1, which is running.
    assert first.attempts == 1 and first.status == "doing"
    assert await _claim(sqlite_store) is None
    await run_write(sqlite_store.engine, lambda c: jobs.finish(c, a1, "succeeded"))
    third = await _claim(sqlite_store)
    assert third is not None and third.id == a2


async def test_a_retry_keeps_its_place_before_later_jobs_of_its_lock(
    sqlite_store: ConversationStore,
) -> None:
    a1, a2 = await _defer(
        sqlite_store,
        JobSpec(kind="learn", args={}, lock="user:a"),
        JobSpec(kind="learn", args={}, lock="user:a"),
    )
    claimed = await _claim(sqlite_store)
    assert claimed is not None and claimed.id == a1
    await run_write(
        sqlite_store.engine,
        lambda c: jobs.finish(c, a1, "todo", error="boom", retry_in=60.0),
    )
    assert await _claim(sqlite_store) is None  # a1 is not due yet, and a2 is behind it.
    await run_write(sqlite_store.engine, lambda c: jobs.finish(c, a1, "failed"))  # No-op: todo.
    listed = {j.id: j for j in await _list(sqlite_store)}
    assert listed[a1].status == "todo" and listed[a1].last_error == "boom"
    assert listed[a2].status == "todo"


async def test_a_run_whose_lease_ran_out_is_claimed_again(
    sqlite_store: ConversationStore,
) -> None:
    (a1,) = await _defer(sqlite_store, JobSpec(kind="learn", args={}, lock="user:a"))
    claimed = await _claim(sqlite_store, now=1000.0)
    assert claimed is not None and await _claim(sqlite_store, now=1010.0) is None
    again = await _claim(sqlite_store, now=1031.0)  # The runner that held it died.
    assert again is not None and again.id == a1 and again.attempts == 2
