"""CPU per turn, every thread counted: one long conversation of `benchmarks.turns`'s
workload (instant models, SQLite, or PostgreSQL with `--pg`), timed with
`time.process_time()` around each `handle`.

    python -m benchmarks.turn_cpu --turns 130 [--pg postgresql://USER@HOST/DB]

With `--pg` the conversation runs in a fresh database on that server, dropped afterwards;
the figures are this process's CPU, not the server's.

Wall time on a shared 2-core machine mostly measures the other processes; the process's
CPU clock counts the SQLite writer thread and the event loop alike and is what the A/B of
docs/benchmarks.md ("the long conversation's cost after jobs landed") compares. Prints
JSON: medians of turns 6-15 and 76-125 (and 951-1000 when run that long), and the total.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import structlog

from benchmarks.turns import BILLING, _model, _user_message, pg_database
from frontdesk.experts.providers import FunctionModel
from frontdesk.orchestrator import Orchestrator

WINDOWS = {"cpu10_ms": (6, 15), "cpu100_ms": (76, 125), "cpu1000_ms": (951, 1000)}


@asynccontextmanager
async def _store(pg: str | None) -> AsyncIterator[str]:
    """A fresh store: a SQLite file in a temporary folder, or a database on `pg`'s server."""
    if pg is not None:
        async with pg_database(pg) as url:
            yield url
        return
    with tempfile.TemporaryDirectory(prefix="frontdesk-cpu-") as tmp:
        yield f"sqlite:///{Path(tmp) / 'cpu.db'}"


async def run(turns: int, pg: str | None = None) -> dict[str, Any]:
    """One conversation of `turns` turns (on SQLite, or on the PostgreSQL server of `pg`);
    the CPU figures."""
    cpu: list[float] = []
    async with _store(pg) as store:
        orch = Orchestrator([BILLING], model=FunctionModel(_model), store=store, memory=False)
        try:
            for i in range(1, turns + 1):
                began = time.process_time()
                await orch.handle("conv-long", _user_message(i), client_message_id=f"m-{i}")
                cpu.append((time.process_time() - began) * 1000)
            began = time.process_time()
        finally:
            await orch.aclose()
        closing = (time.process_time() - began) * 1000
    figures: dict[str, Any] = {"turns": turns, "cpu_total_ms": sum(cpu) + closing}
    for name, (low, high) in WINDOWS.items():
        if high <= turns:
            figures[name] = statistics.median(cpu[low - 1 : high])
    return figures


def main(argv: list[str] | None = None) -> None:
    """Run and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.turn_cpu")
    parser.add_argument("--turns", type=int, default=130)
    parser.add_argument("--pg", default=None, help="a PostgreSQL URL: run there, not SQLite")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(json.dumps(asyncio.run(run(args.turns, args.pg))))


if __name__ == "__main__":
    main()
