"""Memory lookup overhead: a turn for a user with 10, 1,000 and 10,000 facts against a turn
without memory, in the same run, on a SQLite file and on PostgreSQL; and the tokens memory
adds to each expert's request.

Each turn is the whole pipeline with `FunctionModel` answering instantly (triage, request,
handler, response; the memory expert finds nothing), so what is timed is frontdesk's own
work: for a memory turn, the full-text lookup at the start and the block each expert is
sent. The memory expert runs after the reply; it is waited for after each timed turn
(untimed), so that background work never lands inside another turn's time. The baseline is
the same user's turn with memory off (`Orchestrator(memory=False)`: no memory read or
written), interleaved turn by turn with the memory turns on the same database, so that
both see the same machine load (medians; the ratio of the fastest turns of each kind is less
sensitive to other work on the machine); "lookup alone" times `recall` by itself. Facts are seeded
with bulk inserts (the full-text index is filled by the same triggers as any insert).

    python -m benchmarks.memory [--turns 40] [--sizes 10,1000,10000] [--pg URL | --no-pg]

The goal (issue 12) is at most 1.2x the baseline at 1,000 facts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from benchmarks.turns import PG_DEFAULT, _reachable, pg_database
from frontdesk.experts import Category, Outcome
from frontdesk.experts.category import HandlerContext
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator
from frontdesk.threads.memory import memory_table
from frontdesk.threads.models import utcnow
from frontdesk.threads.tokens import EstimatingCounter

USER = "bench-user"
WORDS = (
    "purple idaho maris piper roasting mashing baking chips salad soup gratin waxy floury"
    " organic local delivery morning evening weekend weekday doorstep neighbour garage"
    " allergy peanuts gluten dairy vegan vegetarian spicy mild garlic rosemary butter"
    " cheese onion leek bacon family kids party restaurant cafe office school hindi"
    " english marathi pune mumbai delhi bangalore invoice card cash refund discount"
).split()
QUESTIONS = [
    "I'd like two bags of purple potatoes for roasting this weekend",
    "Can you deliver waxy potatoes to my office in the morning?",
    "What goes well with garlic and rosemary for a family dinner?",
    "Is there a discount if I pay by card for a party order?",
]


class OrderRequest(BaseModel):
    """What the request expert extracts."""

    variety: str
    bags: int


async def _order(request: BaseModel, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Ask the user to confirm the order.")


ORDERS = Category(
    name="ORDERS", description="Buying potatoes", request=OrderRequest, handler=_order
)


class _Team:
    """Instant answers for every expert; keeps the memory block each expert was sent."""

    def __init__(self) -> None:
        self.blocks: dict[str, list[str]] = {}

    def __call__(self, request: ModelRequest) -> Any:
        self.blocks.setdefault(request.expert, []).append(request.memory)
        if request.expert == "triage":
            return {"category": "ORDERS", "reason": "buying"}
        if request.expert == "request":
            return {"request": {"variety": "purple", "bags": 2}}
        if request.expert == "memory":
            return {"facts": []}
        return "Please confirm two bags of purple potatoes."


def _facts(count: int, rng: random.Random) -> list[dict[str, Any]]:
    now = utcnow()
    return [
        {
            "id": f"{i:032x}",
            "user_id": USER,
            "text": "Likes " + " ".join(rng.sample(WORDS, 4)) + f" (note {i})",
            "key": None,
            "source": "memory_expert",
            "created_at": now,
            "updated_at": now,
        }
        for i in range(count)
    ]


async def _seed(orch: Orchestrator, count: int) -> None:
    rows = _facts(count, random.Random(count))
    async with orch.store.engine.begin() as conn:
        for start in range(0, len(rows), 1_000):
            await conn.execute(memory_table.insert(), rows[start : start + 1_000])


async def _turns(url: str, facts: int, turns: int) -> dict[str, Any]:
    """Turn times (ms) of a user with `facts` facts, and of the same user's turns with
    memory off (`Orchestrator(memory=False)`), interleaved on the same database, so that
    both see the same machine load."""
    team = _Team()
    orchs = {
        kind: Orchestrator(
            [ORDERS], model=FunctionModel(team), store=url, speculate=False, memory=on
        )
        for kind, on in (("memory", True), ("none", False))
    }
    times: dict[str, list[float]] = {"memory": [], "none": []}
    try:
        for orch in orchs.values():
            await orch.open()
        await _seed(orchs["memory"], facts)
        for i in range(turns + 5):  # The first five of each warm the caches.
            question = QUESTIONS[i % len(QUESTIONS)]
            for kind, orch in orchs.items():
                started = time.perf_counter()
                await orch.handle(f"{kind}-{i}", question, user_id=USER)
                if i >= 5:
                    times[kind].append((time.perf_counter() - started) * 1000)
                await orch.memory.wait()  # The memory expert's work, untimed.
        started = time.perf_counter()
        for i in range(20):  # The lookup alone, as a turn makes it.
            await orchs["memory"].memory.recall(USER, QUESTIONS[i % len(QUESTIONS)])
        lookup = (time.perf_counter() - started) * 1000 / 20
    finally:
        for orch in orchs.values():
            await orch.aclose()
    counter = EstimatingCounter()
    tokens = {
        expert: round(statistics.mean(counter.count(b) for b in blocks if b))
        for expert, blocks in team.blocks.items()
        if expert != "memory" and any(blocks)
    }
    memory, none = statistics.median(times["memory"]), statistics.median(times["none"])
    fastest = min(times["memory"]) / min(times["none"])
    return {
        "memory_ms": memory,
        "none_ms": none,
        "ratio": round(memory / none, 3),
        "ratio_fastest": round(fastest, 3),
        "lookup_ms": lookup,
        "tokens": tokens,
    }


async def run_backend(url_for: Any, sizes: list[int], turns: int) -> dict[str, Any]:
    """Each size in a database of its own (`url_for()` yields one)."""
    results: dict[str, Any] = {}
    for facts in sizes:
        async with url_for() as url:
            results[str(facts)] = await _turns(url, facts, turns)
    return results


def _sqlite_urls(folder: Path) -> Any:
    from contextlib import asynccontextmanager

    counter = iter(range(1_000))

    @asynccontextmanager
    async def url_for() -> Any:
        yield f"sqlite:///{folder / f'memory-{next(counter)}.db'}"

    return url_for


def _pg_urls(server: str) -> Any:
    def url_for() -> Any:
        return pg_database(server)

    return url_for


def table(name: str, results: dict[str, Any]) -> str:
    """One backend's figures as Markdown rows."""
    rows = []
    for key, f in results.items():
        tokens = ", ".join(f"{e} {t}" for e, t in sorted(f["tokens"].items()))
        rows.append(
            f"| {name} | {int(key):,} | {f['none_ms']:.2f} | {f['memory_ms']:.2f} |"
            f" {f['ratio']:.2f}x | {f['ratio_fastest']:.2f}x | {f['lookup_ms']:.2f} | {tokens} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    """Run the measurement and print a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory")
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--sizes", default="10,1000,10000")
    parser.add_argument("--pg", default=os.environ.get("FRONTDESK_BENCH_PG_URL", PG_DEFAULT))
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(
        "| backend | facts | turn without memory (ms) | turn with memory (ms) | ratio |"
        " ratio of the fastest turns | lookup alone (ms) | memory tokens sent per expert |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="fd-bench-memory-") as folder:
        sqlite = asyncio.run(run_backend(_sqlite_urls(Path(folder)), sizes, args.turns))
    print(table("SQLite", sqlite), flush=True)
    if args.no_pg:
        return
    problem = asyncio.run(_reachable(args.pg))
    if problem is not None:
        print(f"| PostgreSQL | skipped: {problem} | | | | | | |")
        return
    pg = asyncio.run(run_backend(_pg_urls(args.pg), sizes, args.turns))
    print(table("PostgreSQL", pg))


if __name__ == "__main__":
    main()
