"""This process's job runner (SQLite) starts a job between turns, not inside one
(`Jobs.foreground`, `YIELD_WAIT`): a conversation's memory work never queues another
conversation's turn behind its writes, and a turn waiting for its own user's jobs
(`settle`) still gets them run."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from frontdesk.db import run_write
from frontdesk.jobs import store as rows
from frontdesk.jobs.runner import YIELD_WAIT, JobKind, Jobs
from frontdesk.jobs.store import JobSpec, JobStore
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ConversationStore]:
    opened = await ConversationStore.open(f"sqlite:///{tmp_path / 'frontdesk.db'}")
    try:
        yield opened
    finally:
        await opened.aclose()


async def _started(store: ConversationStore, **kwargs: Any) -> tuple[Jobs, asyncio.Event]:
    ran = asyncio.Event()

    async def learn(args: Mapping[str, Any]) -> None:
        ran.set()

    jobs = Jobs(
        store=JobStore(store.engine),
        kinds=[JobKind(name="t.learn", run=learn, yields=True)],
        **kwargs,
    )
    await jobs.start()
    return jobs, ran


async def _record(store: ConversationStore, jobs: Jobs, lock: str | None = None) -> None:
    spec = JobSpec(kind="t.learn", args={}, lock=lock)
    jobs.recorded(await run_write(store.engine, lambda conn: rows.defer(conn, [spec])))


async def test_a_job_recorded_during_a_turn_starts_when_the_turn_ends(
    store: ConversationStore,
) -> None:
    jobs, ran = await _started(store)
    try:
        with jobs.foreground():
            await _record(store, jobs)
            await asyncio.sleep(0.2)  # Well past a wake-up, well short of YIELD_WAIT.
            assert not ran.is_set()
        await asyncio.wait_for(ran.wait(), 5)
    finally:
        await jobs.aclose()


async def test_under_a_constant_stream_of_turns_a_job_still_starts(
    store: ConversationStore,
) -> None:
    jobs, ran = await _started(store)
    try:
        with jobs.foreground():  # A turn that never ends.
            await _record(store, jobs)
            await asyncio.wait_for(ran.wait(), 5)  # After YIELD_WAIT, not never.
    finally:
        await jobs.aclose()


async def test_a_turn_settling_on_its_users_jobs_lets_them_run(store: ConversationStore) -> None:
    jobs, ran = await _started(store)
    try:
        with jobs.foreground():
            await _record(store, jobs, lock="memory:u")
            await jobs.settle("memory:u", within=YIELD_WAIT / 2)
            assert ran.is_set()  # Run at once, not held back for YIELD_WAIT.
    finally:
        await jobs.aclose()
