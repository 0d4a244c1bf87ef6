"""Privacy costs: per-turn overhead of encrypted audit payloads; the time to erase a user.

1. `turn`: full `Orchestrator.handle` turns, CPU time per turn (instant `FunctionModel`
   experts, the potato shop, SQLite files) with audit payloads in clear vs encrypted
   (`audit_key=`), in the same run, alternating turn by turn so that drift hits both
   alike; the ratio of medians is the encryption overhead (goal: at most 1.15x).
2. `append`: one turn's 8-event batch (`benchmarks.audit.turn_batch`) appended alone,
   clear vs encrypted, 300 each: the encryption's own cost without the rest of the turn.
3. `erase`: `Orchestrator.erase_user` of a user with 100 conversations of 2 turns each
   (and one other user), wall time including the SQLite VACUUM.

    python -m benchmarks.privacy [--turns 120] [--conversations 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.audit import turn_batch
from frontdesk.audit.store import AuditLog
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

TEXT = "I'd like to buy a bag of purple potatoes, please, delivered to 12 Rue de la Paix."


def _answer(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "ORDERS", "reason": "buying"}
    if request.expert == "request":
        return {"request": {"variety": "purple", "bags": 1}, "need_more_info": None}
    return "Ok great, please press confirm to buy one bag of purple potatoes."


def _orchestrator(path: Path, key: bytes | None) -> Orchestrator:
    # Long-term memory off: its expert would run (and, unanswered here, fail) after every
    # turn on both sides, noise around the one difference measured, the audit key.
    return Orchestrator(
        categories(),
        model=FunctionModel(_answer),
        store=f"sqlite:///{path}",
        audit_key=key,
        memory=False,
    )


async def bench_turns(folder: Path, turns: int) -> tuple[list[float], list[float]]:
    """CPU milliseconds (the process's, every thread) per turn, clear and encrypted, `turns`
    each, alternating turn by turn: wall time on this shared 2-core machine is mostly other
    processes' noise, CPU time is what the turn itself costs."""
    clear = _orchestrator(folder / "clear.db", None)
    sealed = _orchestrator(folder / "sealed.db", os.urandom(32))
    times: dict[bool, list[float]] = {False: [], True: []}
    try:
        await clear.open()
        await sealed.open()
        for n in range(turns):
            pair = ((False, clear), (True, sealed))
            for encrypted, orch in pair if n % 2 == 0 else pair[::-1]:
                start = time.process_time()
                await orch.handle(f"c{n % 30}", f"{TEXT} ({n})", user_id=f"u{n % 30}")
                times[encrypted].append((time.process_time() - start) * 1000)
    finally:
        await clear.aclose()
        await sealed.aclose()
    return times[False], times[True]


async def bench_append(folder: Path, key: bytes | None, turns: int) -> list[float]:
    """CPU milliseconds per 8-event audit batch (`benchmarks.audit.turn_batch`), clear or sealed."""
    log = await AuditLog.open(f"sqlite:///{folder / f'append-{key is None}.db'}", master_key=key)
    times = []
    try:
        for i in range(turns):
            batch = turn_batch(f"t{i}", history=2 * (i // 30))
            start = time.process_time()
            await log.append(f"c{i % 30}", batch, user_id=f"u{i % 30}")
            times.append((time.process_time() - start) * 1000)
    finally:
        await log.aclose()
    return times


async def bench_erase(folder: Path, conversations: int) -> tuple[float, dict[str, int]]:
    """Seconds to erase a user with `conversations` conversations of 2 turns."""
    orch = _orchestrator(folder / "erase.db", os.urandom(32))
    try:
        for c in range(conversations):
            for t in range(2):
                await orch.handle(f"zoe-{c}", f"{TEXT} turn {t}", user_id="zoe")
        await orch.handle("bob-0", TEXT, user_id="bob")
        start = time.perf_counter()
        report = await orch.erase_user("zoe")
        return time.perf_counter() - start, report.counts()
    finally:
        await orch.aclose()


def _median(ms: list[float]) -> float:
    return statistics.median(ms)


async def run(turns: int, conversations: int) -> None:
    """Print the measurements."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        warm = folder / "warm"
        warm.mkdir()
        await bench_turns(warm, 8)  # Imports, prompt caches, first files.
        clear, sealed = await bench_turns(folder, turns)
        ratio = _median(sealed) / _median(clear)
        print(
            f"turn, audit in clear:  median {_median(clear):.2f} CPU ms (n={len(clear)})\n"
            f"turn, audit encrypted: median {_median(sealed):.2f} CPU ms (n={len(sealed)})\n"
            f"encryption overhead: {ratio:.3f}x (goal <= 1.15x)"
        )
        plain = await bench_append(folder, None, 300)
        sealed_append = await bench_append(folder, os.urandom(32), 300)
        print(
            f"append one 8-event batch: clear {_median(plain):.3f} CPU ms, encrypted"
            f" {_median(sealed_append):.3f} CPU ms: {_median(sealed_append) / _median(plain):.3f}x"
        )
        seconds, counts = await bench_erase(folder, conversations)
        print(
            f"erase a user with {conversations} conversations: {seconds * 1000:.0f} ms"
            f" ({counts['messages']} messages, {counts['audit_keys']} data keys)"
        )


def main(argv: list[str] | None = None) -> None:
    """`python -m benchmarks.privacy [--turns N] [--conversations N]` (and `make bench`)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.privacy")
    parser.add_argument("--turns", type=int, default=160)
    parser.add_argument("--conversations", type=int, default=100)
    args, _ = parser.parse_known_args(argv)
    asyncio.run(run(args.turns, args.conversations))


if __name__ == "__main__":
    main()
