"""Durable background jobs (docs/jobs.md): how soon a fact is learned after its reply, what
recording the jobs costs a turn, and how many jobs one worker runs per second.

- Job latency: from `handle()` returning (the reply and its jobs committed) to the fact
  being readable in the memory table (polled every 5 ms), one new user per turn; inline
  (the orchestrator's own runner) on SQLite and PostgreSQL, and with 1 and 2
  `frontdesk worker` processes on PostgreSQL (`jobs="worker"`). p50 / p95.
- Turn time: the same turn with memory on (the reply's transaction records a
  `memory.learn` job, the runner runs it meanwhile) and with memory off (no job), turn by
  turn interleaved on the same database. Today's in-memory tasks are compared by
  `benchmarks.turns` on this tree vs main (docs/benchmarks.md).
- Throughput: N learn jobs recorded up front, then one runner (inline on SQLite, one
  `frontdesk worker` on PostgreSQL, concurrency 4) runs them all: jobs per second.

    python -m benchmarks.jobs [--turns 30] [--jobs 200] [--pg URL | --no-pg]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from benchmarks._jobs_app import app
from benchmarks.turns import PG_DEFAULT, _reachable, pg_database
from frontdesk.db import run_write
from frontdesk.jobs import store as rows
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.memory import learn_spec

REPO = Path(__file__).resolve().parents[1]
MOVE = "I moved to Mumbai last month"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@asynccontextmanager
async def _workers(url: str, count: int) -> AsyncIterator[None]:
    frontdesk = str(Path(sys.executable).parent / "frontdesk")
    command = [frontdesk, "worker", "--app", "benchmarks._jobs_app:app", "--db", url]
    procs = [
        await asyncio.create_subprocess_exec(
            *command, "--concurrency", "4", cwd=REPO, stderr=subprocess.DEVNULL
        )
        for _ in range(count)
    ]
    try:
        await asyncio.sleep(3.0)  # Started and listening.
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            await asyncio.wait_for(p.wait(), 30)


async def _latency(orch: Orchestrator, turns: int) -> list[float]:
    await orch.open()
    found: list[float] = []
    for _ in range(turns):
        user = f"u-{uuid.uuid4().hex[:8]}"
        await orch.handle(f"c-{user}", MOVE, user_id=user)
        committed = time.perf_counter()
        for _ in range(12_000):  # A minute at most.
            if await orch.memory.store.current(user):
                break
            await asyncio.sleep(0.005)
        found.append((time.perf_counter() - committed) * 1000)
    await orch.drain(timeout=60)
    return found


async def _turn_cost(url: str, turns: int) -> tuple[float, float]:
    on, off = app(store=url), app(store=url, memory=False)
    with_jobs: list[float] = []
    without: list[float] = []
    for i in range(turns):
        for orch, into in ((on, with_jobs), (off, without)):
            user = f"t-{i}"
            began = time.perf_counter()
            await orch.handle(f"c-{user}-{id(orch)}", MOVE, user_id=user)
            into.append((time.perf_counter() - began) * 1000)
        await on.drain(timeout=60)  # The job runs between turns, untimed.
    await on.aclose()
    await off.aclose()
    return statistics.median(with_jobs), statistics.median(without)


async def _throughput(url: str, count: int, *, worker: bool) -> float:
    orch = app(store=url, jobs="worker")
    await orch.open()
    store = orch.store
    specs = []
    for i in range(count):
        user = f"j-{i}"
        message, _ = await store.add_user_message(f"c-{user}", MOVE, user_id=user)
        specs.append(learn_spec(user, message.id))
    if worker:
        async with _workers(url, 1):
            began = time.perf_counter()
            await run_write(store.engine, lambda conn: rows.defer(conn, specs))
            for _ in range(60_000):
                if not await orch.jobs.store.outstanding():
                    break
                await asyncio.sleep(0.01)
            took = time.perf_counter() - began
    else:
        await run_write(store.engine, lambda conn: rows.defer(conn, specs))
        began = time.perf_counter()
        runner = app(store=url)  # Inline: its runner takes them all.
        await runner.open()
        await runner.drain(timeout=600)
        took = time.perf_counter() - began
        await runner.aclose()
    await orch.aclose()
    return count / took


async def main_async(turns: int, count: int, pg: str | None) -> None:
    latency: list[tuple[str, list[float]]] = []
    cost: list[tuple[str, float, float]] = []
    rate: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'jobs.db'}"
        orch = app(store=url)
        latency.append(("SQLite, inline", await _latency(orch, turns)))
        await orch.aclose()
        cost.append(("SQLite", *await _turn_cost(url, turns)))
        url2 = f"sqlite:///{Path(folder) / 'rate.db'}"
        rate.append(("SQLite, inline runner", await _throughput(url2, count, worker=False)))
    if pg is not None:
        async with pg_database(pg) as url:
            orch = app(store=url)
            latency.append(("PostgreSQL, inline", await _latency(orch, turns)))
            await orch.aclose()
            cost.append(("PostgreSQL", *await _turn_cost(url, turns)))
        for n in (1, 2):
            async with pg_database(pg) as url:
                orch = app(store=url, jobs="worker")
                await orch.open()  # Schema first, then the workers.
                async with _workers(url, n):
                    latency.append((f"PostgreSQL, {n} worker(s)", await _latency(orch, turns)))
                await orch.aclose()
        async with pg_database(pg) as url:
            rate.append(("PostgreSQL, 1 worker", await _throughput(url, count, worker=True)))
    print("| where jobs run | p50 (ms) | p95 (ms) |")
    print("|---|---:|---:|")
    for name, values in latency:
        print(f"| {name} | {_pct(values, 0.5):.0f} | {_pct(values, 0.95):.0f} |")
    print()
    print("| backend | turn, memory on: a job recorded (ms) | turn, memory off: none (ms) |")
    print("|---|---:|---:|")
    for name, a, b in cost:
        print(f"| {name} | {a:.1f} | {b:.1f} |")
    print()
    print("| runner (concurrency 4) | learn jobs per second |")
    print("|---|---:|")
    for name, r in rate:
        print(f"| {name} | {r:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--pg", default=os.environ.get("FRONTDESK_BENCH_PG_URL", PG_DEFAULT))
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args(sys.argv[1:] if __name__ == "__main__" else [])
    pg = None if args.no_pg else args.pg
    if pg is not None and (why := asyncio.run(_reachable(pg))) is not None:
        print(f"PostgreSQL not reachable ({why}): SQLite only")
        pg = None
    asyncio.run(main_async(args.turns, args.jobs, pg))


if __name__ == "__main__":
    main()
