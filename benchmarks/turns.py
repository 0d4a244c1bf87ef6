"""Turn overhead: full frontdesk turns with instant fake models, on a SQLite file and on PostgreSQL.

Each turn is the whole pipeline (lock, user message, thread, triage, request, handler,
response, reply, audit batch) with `FunctionModel` answering instantly, so what is timed is
frontdesk's own overhead. Besides the bare turn, one conversation runs with a `user_id`
and memory on (`"memory"` in the figures: the lookup, the memory expert after each
reply). The workload mirrors ../shared/peerbench (three calls per turn; "at turn N" is the
median over the same windows: 6-15, 76-125, 951-1000).

    python -m benchmarks.turns [--turns 1000] [--convs 200] [--per-conv 5] [--out FILE]
                               [--with-peers | --no-peers] [--peers-dir DIR]
                               [--pg URL | --no-pg]

The same two measurements then run on PostgreSQL (`--pg`, default `$FRONTDESK_BENCH_PG_URL`,
else the local server the tests use), each in a database of its own, created and dropped
here; when the default server is not reachable the PostgreSQL figures say so and are
skipped (a URL given with `--pg` must work).

With peers (the default when ../shared/peerbench exists beside the repository, so that
`make bench` reproduces docs/benchmarks.md), the peer script runs first, one repetition of
the stdlib floor, LangGraph and the Agents SDK, then frontdesk, one after the other (never
at the same time: the machine has two cores), and the goals of issue 20 (`GOALS`) are
checked against the best peer of that same run.
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
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
from pydantic import BaseModel
from sqlalchemy.engine import make_url

from frontdesk.experts import Category, Outcome
from frontdesk.experts.category import HandlerContext
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

WINDOWS = {"t10": (6, 15), "t100": (76, 125), "t1000": (951, 1000)}
PEER_CONFIGS = "baseline,langgraph:sync,agents:w20"
FLOOR = "baseline"
"""The stdlib floor: shown beside the peers, but not a peer (it is no framework)."""
PEERS_DIR = Path(__file__).resolve().parents[2] / "shared" / "peerbench"
PG_DEFAULT = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
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
    if request.expert == "memory":  # Each message says "I ...": the memory expert runs.
        return {"facts": []}
    return REPLY


def _user_message(i: int) -> str:
    return f"Turn {i}: I was charged twice for order A-{10000 + i}. {FILLER}"


def _db_bytes(path: Path) -> int:
    return sum(os.path.getsize(p) for p in glob.glob(f"{path}*"))


def _store(db: Path | str) -> str:
    """A SQLite file's path, or a database URL as it is."""
    return db if isinstance(db, str) else f"sqlite:///{db}"


MEMORY_TURNS = 130
"""Turns of the conversation with a user and memory on (turn 10 and turn 100)."""


async def run_long(db: Path | str, turns: int, *, user_id: str | None = None) -> dict[str, Any]:
    """One conversation of `turns` turns; per-turn wall time and the database size. With
    `user_id`, memory is on (what a bank runs): the lookup at each turn's start, the
    memory expert after each reply (in the background, as in production)."""
    orch = Orchestrator(
        [BILLING], model=FunctionModel(_model), store=_store(db), memory=user_id is not None
    )
    times = []
    try:
        for i in range(1, turns + 1):
            started = time.perf_counter()
            reply = await orch.handle(
                "conv-long", _user_message(i), client_message_id=f"m-{i}", user_id=user_id
            )
            times.append((time.perf_counter() - started) * 1000)
            assert reply.text == REPLY, reply.text
    finally:
        await orch.aclose()
    result: dict[str, Any] = {"turns": turns}
    if isinstance(db, Path):
        result["db_mb"] = _db_bytes(db) / 2**20
    for name, (low, high) in WINDOWS.items():
        if high <= turns:
            result[f"{name}_median_ms"] = statistics.median(times[low - 1 : high])
    return result


async def run_concurrent(db: Path | str, convs: int, per_conv: int) -> dict[str, Any]:
    """`convs` conversations of `per_conv` turns, all at once; turns per second."""
    orch = Orchestrator([BILLING], model=FunctionModel(_model), store=_store(db))

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


def _admin_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@asynccontextmanager
async def pg_database(url: str) -> AsyncIterator[str]:
    """A fresh database on the server of `url` for one measurement, dropped afterwards."""
    name = f"fd_bench_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(_admin_dsn(url))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(url).set(database=name).render_as_string(hide_password=False)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def _pg_mb(url: str) -> float:
    conn = await asyncpg.connect(_admin_dsn(url))
    try:
        size: int = await conn.fetchval("SELECT pg_database_size(current_database())")
    finally:
        await conn.close()
    return size / 2**20


async def run_postgres(url: str, turns: int, convs: int, per_conv: int) -> dict[str, Any]:
    """Both measurements on PostgreSQL (store and audit log in one database, as by default)."""
    async with pg_database(url) as db:
        long = await run_long(db, turns)
        long["db_mb"] = await _pg_mb(db)
    async with pg_database(url) as db:
        concurrent = await run_concurrent(db, convs, per_conv)
    return {"long": long, "concurrent": concurrent}


async def _reachable(url: str) -> str | None:
    """None when the server answers, else why not."""
    try:
        conn = await asyncpg.connect(_admin_dsn(url), timeout=5)
    except (OSError, asyncpg.PostgresError) as e:
        return f"{type(e).__name__}: {e}"
    await conn.close()
    return None


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


GOALS = {
    # Issue 20, per backend: turn 10 at most this times the best peer's turn 10 (on
    # PostgreSQL against the peers' SQLite figure: they run on SQLite), 200x5 at least
    # this times the best peer's, turn 1000 at most this times our turn 10.
    "sqlite": {"t10": 0.3, "concurrent": 6.0, "flat": 1.3},
    "postgresql": {"t10": 1.0, "concurrent": 2.0, "flat": 1.3},
}


def goals(
    figures: dict[str, Any], peers: dict[str, Any], backend: str = "sqlite"
) -> dict[str, Any]:
    """Issue 20's goals for `backend` against the best peer (the floor excluded) measured
    in the same run (`GOALS`)."""
    target = GOALS[backend]
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
            "goal": f"<= {target['t10']}x",
            "met": t10 <= target["t10"] * rivals[best_t10]["t10_med_ms"],
        },
        "flat": {
            "ratio": None if t1000 is None else t1000 / t10,
            "goal": f"<= {target['flat']}x",
            "met": t1000 is not None and t1000 <= target["flat"] * t10,
        },
        "concurrent": {
            "best_peer": best_rate,
            "peer_turns_per_s": rivals[best_rate]["turns_per_s"],
            "ours_turns_per_s": rate,
            "ratio": rate / rivals[best_rate]["turns_per_s"],
            "goal": f">= {target['concurrent']}x",
            "met": rate >= target["concurrent"] * rivals[best_rate]["turns_per_s"],
        },
        "db_mb": {name: p.get("db_mb") for name, p in peers.items()}
        | {"frontdesk": ours_long["db_mb"]},
    } | _memory_goal(figures, rivals[best_t10]["t10_med_ms"], target["t10"])


def _memory_goal(figures: dict[str, Any], peer_ms: float, target: float) -> dict[str, Any]:
    """Issue 47's goal, when the figures hold the memory-on conversation: its turn 10 at
    most turn 10's target times the best peer's (the peers run without memory)."""
    if "t10_median_ms" not in figures.get("memory", {}):
        return {}
    ours = figures["memory"]["t10_median_ms"]
    return {
        "memory": {
            "ours_ms": ours,
            "ratio": ours / peer_ms,
            "goal": f"<= {target}x",
            "met": ours <= target * peer_ms,
        }
    }


def goals_table(figures: dict[str, Any]) -> str:
    """The goals of every backend measured, as a Markdown table."""
    rows = ["| backend | goal | figure | met? |", "|---|---|---|---|"]
    for backend, found in (
        ("SQLite", figures.get("goals")),
        ("PostgreSQL", figures.get("postgres", {}).get("goals")),
    ):
        if found is None:
            continue
        for name, label in (
            ("t10", "turn 10 / best peer"),
            ("memory", "turn 10 with memory / best peer"),
            ("concurrent", "200x5 / best peer"),
            ("flat", "turn 1000 / turn 10"),
        ):
            if name not in found:
                continue
            g = found[name]
            ratio = "-" if g["ratio"] is None else f"{g['ratio']:.2f}x"
            met = "yes" if g["met"] else "no"
            rows.append(f"| {backend} | {label} {g['goal']} | {ratio} | {met} |")
    return "\n".join(rows)


def _row(label: str, long: dict[str, Any], conc: dict[str, Any], cell: Any) -> str:
    return (
        f"| {label} | "
        + " | ".join(cell(long.get(f"{w}_median_ms")) for w in WINDOWS)
        + f" | {cell(conc['turns_per_s'])} | {cell(long.get('db_mb'))} |"
    )


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
        _row("**frontdesk** (SQLite)", long, conc, cell),
    ]
    pg = figures.get("postgres", {})
    if "long" in pg:
        rows.append(_row("**frontdesk** (PostgreSQL)", pg["long"], pg["concurrent"], cell))
    for name, p in peers.items():
        seq = "" if p.get("ran_concurrently", True) else " (sequential)"
        rows.append(
            f"| {name} | "
            + " | ".join(cell(p.get(f"{w}_med_ms")) for w in WINDOWS)
            + f" | {cell(p.get('turns_per_s'))}{seq} | {cell(p.get('db_mb'))} |"
        )
    return "\n".join(rows)


def _postgres(args: argparse.Namespace) -> dict[str, Any]:
    """The PostgreSQL figures, or why there are none (only when no URL was asked for)."""
    url = args.pg or os.environ.get("FRONTDESK_BENCH_PG_URL") or PG_DEFAULT
    unreachable = asyncio.run(_reachable(url))
    if unreachable is not None:
        if args.pg:
            raise SystemExit(f"--pg: PostgreSQL is not reachable: {unreachable}")
        print(f"PostgreSQL turns skipped: the default server is not reachable ({unreachable})")
        return {"skipped": unreachable}
    return asyncio.run(run_postgres(url, args.turns, args.convs, args.per_conv))


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
    parser.add_argument("--pg", default=None, help="PostgreSQL URL (default: the local server)")
    parser.add_argument("--no-pg", action="store_true")
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
        memory = asyncio.run(
            run_long(Path(tmp) / "memory.db", min(args.turns, MEMORY_TURNS), user_id="u-bench")
        )
    figures: dict[str, Any] = {"long": long, "concurrent": concurrent, "memory": memory}
    if not args.no_pg:
        figures["postgres"] = _postgres(args)
    if peers is not None:
        figures["peers"] = peers
        figures["goals"] = goals(figures, peers)
        if "long" in figures.get("postgres", {}):
            figures["postgres"]["goals"] = goals(figures["postgres"], peers, "postgresql")
    print(json.dumps(figures, indent=2))
    if peers is not None:
        print(table(figures, peers))
        print(goals_table(figures))
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
