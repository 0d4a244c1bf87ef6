"""CPU per turn, every thread counted: one long conversation of `benchmarks.turns`'s
workload (instant models, SQLite, or PostgreSQL with `--pg`), timed with
`time.process_time()` around each `handle`.

    python -m benchmarks.turn_cpu --turns 130 [--pg postgresql://USER@HOST/DB]
                                  [--conversations N] [--no-gc]

With `--pg` the conversation runs in a fresh database on that server, dropped afterwards;
the figures are this process's CPU, not the server's.

For a sampling profiler (`py-spy record -f raw -- python -m benchmarks.turn_cpu --turns 15
--conversations 80 --no-gc`, read with `benchmarks.profile_shares`): `--conversations`
runs that many conversations one after the other, each message marked with its
conversation's number (the same texts again would be packed and stored by the audit's
caches, not as a new conversation's are), and the windows' medians are over all of them.
`--no-gc` keeps Python's cyclic collector off during the turns: a collection falls inside
one turn in dozens (about 1 ms) or hundreds (over 100 ms), so a median does not see it,
but a profile would put it at whatever line allocated last.

Wall time on a shared 2-core machine mostly measures the other processes; the process's
CPU clock counts the SQLite writer thread and the event loop alike and is what the A/B of
docs/benchmarks.md ("the long conversation's cost after jobs landed") compares. Prints
JSON: medians of turns 6-15 and 76-125 (and 951-1000 when run that long), and the total.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
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


async def run(
    turns: int, pg: str | None = None, *, conversations: int = 1, collect: bool = True
) -> dict[str, Any]:
    """`conversations` conversations of `turns` turns each, one after the other (on SQLite,
    or on the PostgreSQL server of `pg`); the CPU figures. Without `collect`, Python's
    cyclic garbage collector is off during the turns (see the module docstring)."""
    cpu: list[list[float]] = []
    was_collecting = gc.isenabled()
    async with _store(pg) as store:
        orch = Orchestrator([BILLING], model=FunctionModel(_model), store=store, memory=False)
        try:
            if not collect:
                gc.disable()
            for c in range(conversations):
                cid, mark = ("conv-long", "") if conversations == 1 else (f"conv-{c}", f"[{c}] ")
                cpu.append([])
                for i in range(1, turns + 1):
                    began = time.process_time()
                    await orch.handle(cid, mark + _user_message(i), client_message_id=f"m-{i}")
                    cpu[-1].append((time.process_time() - began) * 1000)
            began = time.process_time()
        finally:
            if was_collecting:
                gc.enable()
            await orch.aclose()
        closing = (time.process_time() - began) * 1000
    figures: dict[str, Any] = {
        "turns": turns,
        "conversations": conversations,
        "cpu_total_ms": sum(map(sum, cpu)) + closing,
    }
    for name, (low, high) in WINDOWS.items():
        if high <= turns:
            figures[name] = statistics.median(t for one in cpu for t in one[low - 1 : high])
    return figures


def main(argv: list[str] | None = None) -> None:
    """Run and print the figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.turn_cpu")
    parser.add_argument("--turns", type=int, default=130)
    parser.add_argument("--pg", default=None, help="a PostgreSQL URL: run there, not SQLite")
    parser.add_argument(
        "--conversations", type=int, default=1, help="conversations of --turns turns each"
    )
    parser.add_argument(
        "--no-gc", action="store_true", help="Python's cyclic collector off during the turns"
    )
    args = parser.parse_args(argv)
    if args.turns < 1 or args.conversations < 1:
        parser.error("--turns and --conversations must be at least 1")
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    collect = not args.no_gc
    figures = asyncio.run(
        run(args.turns, args.pg, conversations=args.conversations, collect=collect)
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
