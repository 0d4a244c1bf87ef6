"""Jobs survive dead processes (marker `processes`), on SQLite and PostgreSQL.

- SIGKILL right after the reply of a message that states a fact: a new orchestrator
  (inline jobs) learns every fact within 10 s of opening, with no new message.
- Two `frontdesk worker` processes never learn one user's facts out of order.
- A worker SIGTERMed mid-job stops gracefully and gives the job back; another learns it.
- A worker SIGKILLed mid-job: its job is taken over by another worker.
- An erasure SIGKILLed after its first step: the job runner (inline, or a worker) finishes it.
- Waiting for learning a worker does returns when it is done, and gives up soon after the
  worker dies (not after a minute).
Processes: tests/orchestrator/_jobs_worker.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from frontdesk.orchestrator import Orchestrator
from tests._pg import create_database, drop_database
from tests.orchestrator import _jobs_worker as shop

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

SCRIPT = Path(shop.__file__)
REPO = Path(__file__).resolve().parents[2]
APP = "tests.orchestrator._jobs_worker:app"
KILLS = 5
"""Processes killed right after their reply, per backend."""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'frontdesk.db'}"
        return
    made = create_database()
    try:
        yield made
    finally:
        drop_database(made)


async def until(check: Callable[[], Awaitable[bool]], within: float) -> float:
    """Seconds until `check()` holds, looked at every 50 ms (fails past `within`)."""
    began = time.monotonic()
    for _ in range(int(within / 0.05)):
        if await check():
            return time.monotonic() - began
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {within} s")


def worker(
    url: str, log: Path, *, sleep: float | None = None, grace: float = 1.0
) -> subprocess.Popen[bytes]:
    """A `frontdesk worker` process running the test shop's jobs."""
    env = {**os.environ, "FRONTDESK_TEST_LOG": str(log)}
    if sleep is not None:
        env["FRONTDESK_TEST_LEARN_SLEEP"] = str(sleep)
    frontdesk = str(Path(sys.executable).parent / "frontdesk")
    command = [frontdesk, "worker", "--app", APP, "--db", url]
    command += ["--concurrency", "4", "--grace", str(grace)]
    return subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE)


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def test_a_kill_right_after_the_reply_loses_no_fact(url: str) -> None:
    users = [f"killed-{i}" for i in range(KILLS)]
    for user in users:
        run = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(SCRIPT), "reply", url, user],
            cwd=REPO,
            capture_output=True,
            timeout=120,
        )
        assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]
    orch = shop.app(store=url)  # Inline jobs: its runner finds what the dead ones left.
    await orch.open()

    async def all_learned() -> bool:
        facts = [[m.text for m in await orch.memories(u)] for u in users]
        return all(f == ["Lives in Mumbai"] for f in facts)

    took = await until(all_learned, 10)
    lost = [u for u in users if not await orch.memories(u)]
    print(f"kills: {KILLS}, jobs lost: {len(lost)}, all learned {took:.1f} s after opening")
    assert lost == [] and took < 10
    await orch.drain(timeout=10)
    assert await orch.jobs.list() == []
    await orch.aclose()


async def test_two_workers_never_learn_one_users_facts_out_of_order(
    url: str, tmp_path: Path
) -> None:
    log = tmp_path / "learning"
    workers = [worker(url, log), worker(url, log)]
    users = [f"movers-{i}" for i in range(6)]
    try:
        run = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, str(SCRIPT), "turns", url, *users],
            cwd=REPO,
            capture_output=True,
            timeout=180,
        )
        assert run.returncode == 0, run.stderr.decode()[-3000:]
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=30) for w in workers]
    assert codes == [0, 0]
    orch = Orchestrator([shop.CHAT], model="offline", store=url, jobs="worker")
    for user in users:  # Learnt out of order, Pune would have superseded Mumbai.
        current = await orch.memories(user)
        assert [m.text for m in current] == ["Lives in Mumbai"], user
    events = lines(log)
    for text in ("I live in Pune", shop.FACT_TEXT):
        assert sum(1 for e in events if e == f"learned {text}") == len(users)
    await orch.aclose()


async def test_a_worker_sigtermed_mid_job_gives_it_back_and_another_learns_it(
    url: str, tmp_path: Path
) -> None:
    log = tmp_path / "learning"
    orch = shop.app(store=url, jobs="worker")
    await orch.handle("conv-t", shop.FACT_TEXT, user_id="u-term")
    slow = worker(url, log, sleep=60, grace=1.0)
    try:

        async def started() -> bool:
            return any(line.startswith("started") for line in lines(log))

        await until(started, 30)
        slow.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(slow.wait, 30)
    finally:
        if slow.poll() is None:
            slow.kill()
    assert code == 0  # A graceful stop.
    (back,) = await orch.jobs.list()
    assert back.status == "todo" and back.kind == "memory.learn"  # Given back, not lost.
    assert await orch.memories("u-term") == []
    fast = worker(url, log)
    try:
        await orch.drain(timeout=30)
    finally:
        fast.send_signal(signal.SIGTERM)
        fast.wait(timeout=30)
    assert [m.text for m in await orch.memories("u-term")] == ["Lives in Mumbai"]
    await orch.aclose()


async def test_a_worker_killed_mid_job_leaves_it_to_another(url: str, tmp_path: Path) -> None:
    log = tmp_path / "learning"
    orch = shop.app(store=url, jobs="worker")
    await orch.handle("conv-k", shop.FACT_TEXT, user_id="u-kill")
    doomed = worker(url, log, sleep=60)
    try:

        async def started() -> bool:
            return any(line.startswith("started") for line in lines(log))

        await until(started, 30)
    finally:
        doomed.kill()  # SIGKILL: no graceful stop, the job stays `doing`.
        doomed.wait(timeout=30)
    fast = worker(url, log)
    try:
        await orch.drain(timeout=40)  # After the dead worker's lease or heartbeat ran out.
    finally:
        fast.send_signal(signal.SIGTERM)
        fast.wait(timeout=30)
    assert [m.text for m in await orch.memories("u-kill")] == ["Lives in Mumbai"]
    await orch.aclose()


def privacy_worker(url: str, key: str) -> subprocess.Popen[bytes]:
    """A `frontdesk worker` process of the privacy tests' app (with its master key)."""
    env = {**os.environ, "FRONTDESK_MASTER_KEY": key}
    frontdesk = str(Path(sys.executable).parent / "frontdesk")
    command = [frontdesk, "worker", "--app", "tests.privacy._app:worker_app", "--db", url]
    return subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE)


@pytest.mark.parametrize("runner", ["inline", "worker"])
async def test_an_erasure_killed_midway_is_finished_by_the_job_runner(
    url: str, runner: str, tmp_path: Path
) -> None:
    from frontdesk.orchestrator.erasure import ERASE_LEASE
    from tests.privacy import _app as privacy
    from tests.privacy.test_privacy import ZOE_STRINGS, new_key, raw_copies, verify_all

    key = new_key()
    await privacy.record(url, key, turns=2)
    script = str(Path(privacy.__file__))
    run = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, script, url, key, "messages", "request"],
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]
    jobs = privacy.orchestrator(url, key, jobs=runner)
    await jobs.open()
    (left,) = await jobs.jobs.list()
    assert left.kind == "privacy.erase" and left.status == "todo"  # Recorded, not lost.
    began = time.monotonic()
    if runner == "inline":
        await jobs.drain(timeout=ERASE_LEASE + 20)
    else:
        process = privacy_worker(url, key)
        try:

            async def finished() -> bool:
                return not await jobs.jobs.list()

            await until(finished, ERASE_LEASE + 30)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    took = time.monotonic() - began
    await jobs.aclose()
    print(f"erasure killed after its first step, finished by the {runner} runner in {took:.1f} s")
    assert raw_copies(url, ZOE_STRINGS) == 0
    assert await verify_all(url)


async def test_waiting_for_learning_follows_a_worker_and_stops_when_it_dies(
    url: str, tmp_path: Path
) -> None:
    from frontdesk.jobs.runner import RUNNER_ALIVE

    log = tmp_path / "learning"
    orch = shop.app(store=url, jobs="worker")
    await orch.open()
    w = worker(url, log)
    try:

        async def alive() -> bool:
            return await orch.jobs.store.runners_alive(within=RUNNER_ALIVE) > 0

        await until(alive, 30)
        await orch.handle("conv-a", shop.FACT_TEXT, user_id="u-follow")
        began = time.monotonic()
        assert await orch.memory.wait() == 0
        took = time.monotonic() - began
        assert [m.text for m in await orch.memories("u-follow")] == ["Lives in Mumbai"]
    finally:
        w.kill()
        w.wait(timeout=30)
    print(f"learning done by a worker, seen by the waiting process after {took:.2f} s")
    assert took < 5.0
    await orch.handle("conv-a", "I live in Pune", user_id="u-follow")  # Nobody runs it now.
    began = time.monotonic()
    assert await orch.memory.wait() == 1
    gave_up = time.monotonic() - began
    print(f"worker killed: the wait gave up after {gave_up:.2f} s (not 60)")
    assert gave_up < RUNNER_ALIVE + 3
    await orch.aclose()
