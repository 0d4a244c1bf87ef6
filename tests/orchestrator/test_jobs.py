"""The job engine (jobs/runner.py) on SQLite (in process) and PostgreSQL (Procrastinate):
one lock's jobs in order, even across two runners; retries then `failed`, kept and listed;
periodic jobs without traffic; `drain`; a stop gives running jobs back."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from frontdesk.db import run_write
from frontdesk.errors import ConfigError
from frontdesk.jobs import store as rows
from frontdesk.jobs.runner import DrainTimeout, JobKind, Jobs, PeriodicJob
from frontdesk.jobs.store import JobSpec, JobStore
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'frontdesk.db'}"
    return str(request.getfixturevalue("fresh_pg_url"))


@pytest.fixture
async def store(url: str) -> AsyncIterator[ConversationStore]:
    opened = await ConversationStore.open(url)
    try:
        yield opened
    finally:
        await opened.aclose()


def conninfo(store: ConversationStore) -> str | None:
    if store.engine.dialect.name != "postgresql":
        return None
    return (
        make_url(str(store.engine.url.render_as_string(hide_password=False)))
        .set(drivername="postgresql")
        .render_as_string(hide_password=False)
    )


def engine_of(store: ConversationStore, **kwargs: Any) -> Jobs:
    return Jobs(store=JobStore(store.engine), conninfo=conninfo(store), **kwargs)


async def record(store: ConversationStore, jobs: Jobs, *specs: JobSpec) -> list[int]:
    recorded = await run_write(store.engine, lambda conn: rows.defer(conn, specs))
    jobs.recorded(recorded)
    return [job.id for job in recorded]


async def test_one_locks_jobs_run_in_order_even_across_two_runners(
    store: ConversationStore,
) -> None:
    seen: list[tuple[str, int]] = []
    running: set[str] = set()
    overlaps: list[str] = []

    async def learn(args: Mapping[str, Any]) -> None:
        user = str(args["user"])
        if user in running:
            overlaps.append(user)
        running.add(user)
        await asyncio.sleep(random.uniform(0.0, 0.02))
        seen.append((user, int(args["n"])))
        running.discard(user)

    kinds = [JobKind(name="test.learn", run=learn)]
    first = engine_of(store, kinds=kinds, concurrency=4)
    second = engine_of(store, kinds=kinds, concurrency=4)
    specs = [
        JobSpec(kind="test.learn", args={"user": u, "n": n}, lock=f"memory:{u}")
        for n in range(6)
        for u in ("a", "b", "c")
    ]
    await record(store, first, *specs)
    await first.start()
    await second.start()
    try:
        await first.drain(timeout=30)
    finally:
        await first.aclose()
        await second.aclose()
    assert len(seen) == len(specs) and not overlaps
    for user in ("a", "b", "c"):
        assert [n for u, n in seen if u == user] == list(range(6))


async def test_a_turn_settling_on_jobs_another_process_ran_does_not_wait_its_window(
    store: ConversationStore,
) -> None:
    """Several processes share one database: a user's memory job recorded here may run in
    another process, whose runner cannot tell this one. The settle reads the job rows, so
    it ends once the job is done, and the next turns of the user do not wait at all (before,
    every later turn of that user waited the whole window for a job long done)."""
    ran = asyncio.Event()

    async def learn(args: Mapping[str, Any]) -> None:
        ran.set()

    kinds = [JobKind(name="test.learn", run=learn)]
    here = engine_of(store, kinds=kinds)  # Records the job; its runner is never started.
    elsewhere = engine_of(store, kinds=kinds)
    await record(store, here, JobSpec(kind="test.learn", args={}, lock="memory:alice"))
    await elsewhere.start()
    try:
        await asyncio.wait_for(ran.wait(), 30)
        await elsewhere.drain(timeout=30)
        async with asyncio.timeout(20):  # The window: a settle that cannot see would use it.
            await here.settle("memory:alice", within=60)
        async with asyncio.timeout(1):
            await here.settle("memory:alice", within=60)  # Nothing of alice's left to wait for.
    finally:
        await elsewhere.aclose()
        await here.aclose()


async def test_a_job_failing_three_times_ends_failed_and_is_listed(
    store: ConversationStore,
) -> None:
    runs: list[float] = []

    async def broken(args: Mapping[str, Any]) -> None:
        runs.append(time.monotonic())
        raise RuntimeError("the summariser is down")

    jobs = engine_of(store, kinds=[JobKind(name="test.broken", run=broken, backoff=0.2)])
    (job_id,) = await record(store, jobs, JobSpec(kind="test.broken", args={}))
    await jobs.start()
    try:
        await jobs.drain(timeout=30)
    finally:
        await jobs.aclose()
    assert len(runs) == 3
    (failed,) = await jobs.list(failed_only=True)
    assert failed.id == job_id and failed.status == "failed" and failed.attempts == 3
    assert failed.last_error == "RuntimeError: the summariser is down"
    assert [j.id for j in await jobs.list()] == [job_id]  # Kept, never dropped.
    assert await jobs.store.retry(job_id)  # Ops mend it: it runs once more.
    await jobs.start()
    try:
        await jobs.drain(timeout=30)
    finally:
        await jobs.aclose()
    assert len(runs) == 4


async def test_a_periodic_job_runs_with_no_job_recorded(store: ConversationStore) -> None:
    ticks: list[float] = []
    twice = asyncio.Event()

    async def tick() -> None:
        ticks.append(time.monotonic())
        if len(ticks) >= 2:
            twice.set()

    jobs = engine_of(store, periodic=[PeriodicJob(name="test.tick", every=1, run=tick)])
    await jobs.start()
    try:
        await asyncio.wait_for(twice.wait(), 8)
        await jobs.drain(timeout=5)  # Periodic jobs are not waited for.
    finally:
        await jobs.aclose()
    assert len(ticks) >= 2


async def test_drain_and_close_with_nothing_pending_return_at_once(
    store: ConversationStore,
) -> None:
    jobs = engine_of(store, kinds=[JobKind(name="test.noop", run=_noop)])
    await jobs.start()
    began = time.monotonic()
    await jobs.drain()
    await jobs.aclose()
    assert time.monotonic() - began < 2.0


async def test_drain_times_out_with_the_count_left(store: ConversationStore) -> None:
    jobs = engine_of(store, mode="worker", kinds=[JobKind(name="test.noop", run=_noop)])
    await record(store, jobs, JobSpec(kind="test.noop", args={}))  # No runner here.
    with pytest.raises(DrainTimeout) as caught:
        await jobs.drain(timeout=0.2)
    assert caught.value.left == 1


async def test_a_stopped_runner_gives_its_running_job_back(
    store: ConversationStore,
) -> None:
    started = asyncio.Event()
    runs: list[int] = []

    async def slow(args: Mapping[str, Any]) -> None:
        runs.append(1)
        started.set()
        await asyncio.sleep(3600)

    jobs = engine_of(store, kinds=[JobKind(name="test.slow", run=slow)], grace=0.2)
    (job_id,) = await record(store, jobs, JobSpec(kind="test.slow", args={}))
    await jobs.start()
    await asyncio.wait_for(started.wait(), 20)
    await jobs.aclose()
    (back,) = await jobs.list()
    assert back.id == job_id and back.status == "todo"  # Retryable, not lost.


async def test_bad_configuration_is_refused(store: ConversationStore) -> None:
    with pytest.raises(ConfigError, match="inline"):
        engine_of(store, mode="sometimes")
    with pytest.raises(ConfigError, match="divisor of 60"):
        engine_of(store, periodic=[PeriodicJob(name="p", every=7, run=_tick)])
    with pytest.raises(ConfigError, match="distinct"):
        engine_of(store, kinds=[JobKind(name="k", run=_noop), JobKind(name="k", run=_noop)])


async def _noop(args: Mapping[str, Any]) -> None:
    return None


async def _tick() -> None:
    return None


async def test_a_taken_queueing_lock_skips_the_job_and_keeps_the_transaction(
    store: ConversationStore,
) -> None:
    """The reply's transaction records its jobs: a queueing lock already waiting must skip
    that job, not abort the transaction (Procrastinate's own defer raises there)."""
    jobs = engine_of(store, mode="worker", kinds=[JobKind(name="test.noop", run=_noop)])
    waiting = JobSpec(kind="test.noop", args={"n": 1}, lock="c", queueing_lock="c")

    def twice(conn: Any) -> tuple[list[rows.Deferred], list[rows.Deferred]]:
        first = rows.defer(conn, [waiting])
        again = rows.defer(conn, [JobSpec(kind="test.noop", args={"n": 2}), waiting])
        return first, again

    first, again = await run_write(store.engine, twice)
    assert [j.lock for j in first] == ["c"]
    assert len(again) == 1 and again[0].lock is None  # The unlocked one only.
    listed = await jobs.list()
    assert sorted(j.id for j in listed) == sorted([first[0].id, again[0].id])


async def test_a_job_behind_its_lock_runs_as_the_one_ahead_ends(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job recorded behind a running job of its lock runs when that one ends, not a poll
    later: with the poll made an hour long, drain still returns. SQLite: the in-process
    runner looks again when a job ends. PostgreSQL: Procrastinate wakes its workers only
    for a new job; migration 0021's trigger wakes them when a job of a lock ends (without
    it, the second job here waits the hour and drain times out)."""
    from frontdesk.jobs import runner as engine

    monkeypatch.setattr(engine, "POLL", 3600.0)
    # A periodic job's insert wakes Procrastinate's worker too: made a day apart here.
    recover = engine._ProcrastinateRunner._recover_stalled
    monkeypatch.setattr(
        engine._ProcrastinateRunner,
        "_recover_stalled",
        lambda runner: dataclasses.replace(recover(runner), every=86400),
    )
    order: list[int] = []

    async def step(args: Mapping[str, Any]) -> None:
        await asyncio.sleep(0.05)
        order.append(int(args["n"]))

    store = await ConversationStore.open(url)
    jobs = engine_of(store, kinds=[JobKind(name="test.step", run=step)], concurrency=2)
    await jobs.start()
    try:
        await _listening(store)  # Jobs recorded before the worker listens wait a poll.
        specs = [JobSpec(kind="test.step", args={"n": n}, lock="k") for n in (1, 2, 3)]
        await record(store, jobs, *specs)
        await jobs.drain(timeout=20)
    finally:
        await jobs.aclose()
        await store.aclose()
    assert order == [1, 2, 3]


async def _listening(store: ConversationStore, within: float = 10.0) -> None:
    """On PostgreSQL, wait until Procrastinate's worker has sent its LISTEN (its session's
    last statement) in this test's own database (other tests' workers listen in theirs);
    on SQLite there is nothing to wait for."""
    if store.engine.dialect.name != "postgresql":
        return
    seen = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND query LIKE 'LISTEN %procrastinate%'"
    )
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        async with store.engine.connect() as conn:
            if (await conn.exec_driver_sql(seen)).scalar_one():
                return
        await asyncio.sleep(0.02)
    raise AssertionError("Procrastinate's worker never listened")
