"""Turn overhead: full frontdesk turns with instant fake models on a SQLite file.

Each turn is the whole pipeline (lock, user message, thread, triage, request, handler,
response, reply, audit batch) with `FunctionModel` answering instantly, so what is timed is
frontdesk's own overhead. The workload mirrors ../shared/peerbench (three calls per turn;
"at turn N" is the median over the same windows: 6-15, 76-125, 951-1000).

    python -m benchmarks.turns [--turns 1000] [--convs 200] [--per-conv 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from experts import Category, Outcome
from experts.category import HandlerContext
from experts.providers import FunctionModel, ModelRequest
from orchestrator import Orchestrator

WINDOWS = {"t10": (6, 15), "t100": (76, 125), "t1000": (951, 1000)}
REPLY = "Thanks, I have checked your account; the refund of 42.50 is on its way."
FILLER = (
    "I have been a customer for a while and something does not look right, could you "
    "please check it and tell me what to do next? Thanks in advance."
)


class BillingRequest(BaseModel):
    """What the request expert extracts."""

    order_id: str
    amount: float


async def _refund(request: BaseModel, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Tell the user the refund is on its way.")


BILLING = Category(
    name="BILLING",
    description="Payments, refunds and invoices",
    request=BillingRequest,
    handler=_refund,
    examples=["I was charged twice"],
)


def _model(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "BILLING", "reason": "bench"}
    if request.expert == "request":
        return {"request": {"order_id": "A-12345", "amount": 42.5}, "need_more_info": None}
    if request.expert == "summariser":
        return "The user asked about refunds of several orders."
    return REPLY


def _user_message(i: int) -> str:
    return f"Turn {i}: I was charged twice for order A-{10000 + i}. {FILLER}"


def _db_bytes(path: Path) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(f"{path}*"))


async def run_long(db: Path, turns: int) -> dict[str, Any]:
    """One conversation of `turns` turns; per-turn wall time and the database size."""
    orch = Orchestrator([BILLING], model=FunctionModel(_model), store=f"sqlite:///{db}")
    times = []
    try:
        for i in range(1, turns + 1):
            started = time.perf_counter()
            reply = await orch.handle("conv-long", _user_message(i), client_message_id=f"m-{i}")
            times.append((time.perf_counter() - started) * 1000)
            assert reply.text == REPLY, reply.text
    finally:
        await orch.aclose()
    result: dict[str, Any] = {"turns": turns, "db_mb": _db_bytes(db) / 2**20}
    for name, (low, high) in WINDOWS.items():
        if high <= turns:
            result[f"{name}_median_ms"] = statistics.median(times[low - 1 : high])
    return result


async def run_concurrent(db: Path, convs: int, per_conv: int) -> dict[str, Any]:
    """`convs` conversations of `per_conv` turns, all at once; turns per second."""
    orch = Orchestrator([BILLING], model=FunctionModel(_model), store=f"sqlite:///{db}")

    async def conversation(c: int) -> None:
        for i in range(1, per_conv + 1):
            reply = await orch.handle(f"conv-{c}", _user_message(i), client_message_id=f"m-{i}")
            assert reply.text == REPLY, reply.text

    try:
        await orch.handle("warm-up", "hello")
        started = time.perf_counter()
        await asyncio.gather(*(conversation(c) for c in range(convs)))
        elapsed = time.perf_counter() - started
    finally:
        await orch.aclose()
    return {"convs": convs, "per_conv": per_conv, "turns_per_s": convs * per_conv / elapsed}


def main(argv: list[str] | None = None) -> None:
    """Run both measurements and print (and optionally write) the figures as JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.turns")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--convs", type=int, default=200)
    parser.add_argument("--per-conv", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args, _ = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory(prefix="frontdesk-bench-") as tmp:
        long = asyncio.run(run_long(Path(tmp) / "long.db", args.turns))
        concurrent = asyncio.run(
            run_concurrent(Path(tmp) / "concurrent.db", args.convs, args.per_conv)
        )
    figures = {"long": long, "concurrent": concurrent}
    print(json.dumps(figures, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
