"""Turn overhead: full frontdesk turns with instant fake models on a SQLite file.

Each turn is the whole pipeline (lock, user message, thread, triage, request, handler,
response, reply, audit batch) with `FunctionModel` answering instantly, so what is timed is
frontdesk's own overhead. The workload mirrors ../shared/peerbench (three calls per turn;
"at turn N" is the median over the same windows: 6-15, 76-125, 951-1000).

    python -m benchmarks.turns [--turns 1000] [--convs 200] [--per-conv 5] [--out FILE]
                               [--with-peers | --no-peers] [--peers-dir DIR]

With peers (the default when ../shared/peerbench exists beside the repository, so that
`make bench` reproduces docs/benchmarks.md), the peer script runs first, one repetition of
the stdlib floor, LangGraph and the Agents SDK, then frontdesk, one after the other (never
at the same time: the machine has two cores), and the goals of issue 4 are checked against
the best peer of that same run.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from frontdesk.experts import Category, Outcome
from frontdesk.experts.category import HandlerContext
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

WINDOWS = {"t10": (6, 15), "t100": (76, 125), "t1000": (951, 1000)}
PEER_CONFIGS = "baseline,langgraph:sync,agents:w20"
FLOOR = "baseline"
"""The stdlib floor: shown beside the peers, but not a peer (it is no framework)."""
PEERS_DIR = Path(__file__).resolve().parents[2] / "shared" / "peerbench"
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


def run_peers(peers_dir: Path, results: Path, turns: int, convs: int, per_conv: int) -> Any:
    """Run the peer benchmark (its own virtualenv, one repetition); its summary.json."""
    subprocess.run(
        [
            "bash",
            str(peers_dir / "run.sh"),
            "--reps",
            "1",
            "--configs",
            PEER_CONFIGS,
            "--turns",
            str(turns),
            "--convs",
            str(convs),
            "--per-conv",
            str(per_conv),
            "--results",
            str(results),
        ],
        check=True,
    )
    return json.loads((results / "summary.json").read_text())


def goals(figures: dict[str, Any], peers: dict[str, Any]) -> dict[str, Any]:
    """Issue 4's goals against the best peer (the floor excluded) measured in the same run."""
    ours_long, ours_conc = figures["long"], figures["concurrent"]
    rivals = {name: p for name, p in peers.items() if name != FLOOR}
    best_t10 = min(rivals, key=lambda name: rivals[name]["t10_med_ms"])
    best_rate = max(rivals, key=lambda name: rivals[name]["turns_per_s"])
    t10 = ours_long["t10_median_ms"]
    t1000 = ours_long.get("t1000_median_ms")
    rate = ours_conc["turns_per_s"]
    return {
        "t10": {
            "best_peer": best_t10,
            "peer_ms": rivals[best_t10]["t10_med_ms"],
            "ours_ms": t10,
            "ratio": t10 / rivals[best_t10]["t10_med_ms"],
            "met": t10 <= 0.3 * rivals[best_t10]["t10_med_ms"],
        },
        "flat": {
            "ratio": None if t1000 is None else t1000 / t10,
            "met": t1000 is not None and t1000 <= 1.3 * t10,
        },
        "concurrent": {
            "best_peer": best_rate,
            "peer_turns_per_s": rivals[best_rate]["turns_per_s"],
            "ours_turns_per_s": rate,
            "ratio": rate / rivals[best_rate]["turns_per_s"],
            "met": rate >= 4 * rivals[best_rate]["turns_per_s"],
        },
        "db_mb": {name: p.get("db_mb") for name, p in peers.items()}
        | {"frontdesk": ours_long["db_mb"]},
    }


def table(figures: dict[str, Any], peers: dict[str, Any]) -> str:
    """The Markdown table of docs/benchmarks.md ("Turn overhead")."""

    def cell(value: float | None) -> str:
        if value is None:
            return "-"
        return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"

    long, conc = figures["long"], figures["concurrent"]
    rows = [
        "| config | ms @10 | ms @100 | ms @1000 | 200x5 turns/s | DB MB @1000 |",
        "|---|---|---|---|---|---|",
        "| **frontdesk** | "
        + " | ".join(cell(long.get(f"{w}_median_ms")) for w in WINDOWS)
        + f" | {cell(conc['turns_per_s'])} | {cell(long['db_mb'])} |",
    ]
    for name, p in peers.items():
        seq = "" if p.get("ran_concurrently", True) else " (sequential)"
        rows.append(
            f"| {name} | "
            + " | ".join(cell(p.get(f"{w}_med_ms")) for w in WINDOWS)
            + f" | {cell(p.get('turns_per_s'))}{seq} | {cell(p.get('db_mb'))} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    """Run both measurements (after the peers'), print (and optionally write) the figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.turns")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--convs", type=int, default=200)
    parser.add_argument("--per-conv", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--with-peers", dest="with_peers", action="store_true", default=None)
    parser.add_argument("--no-peers", dest="with_peers", action="store_false")
    parser.add_argument("--peers-dir", type=Path, default=PEERS_DIR)
    args, _ = parser.parse_known_args(argv)
    with_peers = args.with_peers
    if with_peers is None:
        with_peers = (args.peers_dir / "run.sh").exists()
    with tempfile.TemporaryDirectory(prefix="frontdesk-bench-") as tmp:
        peers = None
        if with_peers:
            peers = run_peers(
                args.peers_dir, Path(tmp) / "peers", args.turns, args.convs, args.per_conv
            )
        long = asyncio.run(run_long(Path(tmp) / "long.db", args.turns))
        concurrent = asyncio.run(
            run_concurrent(Path(tmp) / "concurrent.db", args.convs, args.per_conv)
        )
    figures: dict[str, Any] = {"long": long, "concurrent": concurrent}
    if peers is not None:
        figures["peers"] = peers
        figures["goals"] = goals(figures, peers)
    print(json.dumps(figures, indent=2))
    if peers is not None:
        print(table(figures, peers))
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
