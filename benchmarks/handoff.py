"""Hand-off cost: what reading the open hand-off adds to every bot turn, and what a message
kept for a person costs, with instant fake models on a SQLite file.

    python -m benchmarks.handoff [--turns 200]

Three runs of `--turns` turns each, interleaved in rounds of 20 so that the machine's
drift hits all three alike: bot turns as they run now (the hand-off read in the turn's
first transaction); the same bot turns with that read switched off (the baseline, what a
turn cost before hand-off existed); and messages sent while the conversation is handed off
(stored with their waiting marker and its audit events, no model call). Medians, in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.turns import BILLING, REPLY, _model, _user_message
from frontdesk.experts.providers import FunctionModel
from frontdesk.orchestrator import Orchestrator, turn

ROUND = 20


@contextmanager
def _no_handoff_read() -> Iterator[None]:
    """The turn's first transaction without the hand-off read (the baseline)."""
    original = turn.begin

    async def plain(p: Any, lease: Any, conversation_id: str, text: str, **kw: Any) -> Any:
        return await p.store.start_turn(conversation_id, text, lease=lease, **kw)

    turn.begin = plain
    try:
        yield
    finally:
        turn.begin = original


async def _round(orch: Orchestrator, cid: str, start: int, times: list[float]) -> None:
    for i in range(start, start + ROUND):
        began = time.perf_counter()
        reply = await orch.handle(cid, _user_message(i), client_message_id=f"m-{i}")
        times.append((time.perf_counter() - began) * 1000)
        assert reply.text == REPLY or reply.handoff, reply.text


async def run(db: Path, turns: int) -> dict[str, float]:
    """The three medians (see the module docstring) and their ratios."""
    orch = Orchestrator([BILLING], model=FunctionModel(_model), store=f"sqlite:///{db}")
    now: list[float] = []
    baseline: list[float] = []
    held: list[float] = []
    try:
        for cid in ("now", "baseline", "held"):
            await orch.handle(cid, "hello", client_message_id="warm-up")
        await orch.hand_off("held", "bench")
        for start in range(1, turns + 1, ROUND):
            await _round(orch, "now", start, now)
            with _no_handoff_read():
                await _round(orch, "baseline", start, baseline)
            await _round(orch, "held", start, held)
    finally:
        await orch.aclose()
    result = {
        "bot_turn_ms": statistics.median(now),
        "bot_turn_without_handoff_read_ms": statistics.median(baseline),
        "held_message_ms": statistics.median(held),
    }
    result["read_overhead_ratio"] = (
        result["bot_turn_ms"] / result["bot_turn_without_handoff_read_ms"]
    )
    result["held_vs_bot_ratio"] = result["held_message_ms"] / result["bot_turn_ms"]
    return result


def main(argv: list[str] | None = None) -> None:
    """Print the medians and ratios."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.handoff")
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args(argv or [])
    with tempfile.TemporaryDirectory() as folder:
        result = asyncio.run(run(Path(folder) / "bench.db", args.turns))
    for name, value in result.items():
        print(f"{name:36} {value:8.3f}")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
