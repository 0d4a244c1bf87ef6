"""What reading the summariser's and memory expert's costs from the audit log adds to
`frontdesk report`: real turns (the offline stand-in, memory and compaction on) written
through the Orchestrator, then the report built without the log (the turns' own usage
only) and with it (each page's `model_attempt` rows read too), interleaved in one process.

    python -m benchmarks.report_audit [--conversations 300] [--rounds 7] [--db URL]

Prints the audit rows, the median report time of each, and the ratio (with / without).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import structlog

from frontdesk import Orchestrator
from frontdesk.audit.tables import audit_event
from frontdesk.examples.potato_shop import categories
from frontdesk.orchestrator.report import JOB_EXPERTS, build_report
from frontdesk.threads.compaction import CompactionPolicy

TURNS = (
    "I live in Pune and I want 3 bags of potatoes",  # a fact: the memory expert runs
    "where is my order 12345?",
    "that's all, thanks",  # the customer closes it
)


async def run(url: str, conversations: int, rounds: int) -> dict[str, Any]:
    """Write the conversations, then time the two reports `rounds` times, interleaved."""
    orch = Orchestrator(categories(), model="offline", store=url)
    orch.compaction_policy = CompactionPolicy(threshold=200, keep_exchanges=1)
    for i in range(conversations):
        for text in TURNS:
            await orch.handle(f"c{i}", text, user_id=f"u{i}")
        await orch.drain()
    log = orch.audit_log
    assert log is not None
    async with log.engine.connect() as conn:
        stmt = sa.select(sa.func.count()).select_from(audit_event)
        rows = int((await conn.execute(stmt)).scalar_one())
        attempts = int(
            (await conn.execute(stmt.where(audit_event.c.kind == "model_attempt"))).scalar_one()
        )
    ids = [f"c{i}" for i in range(conversations)]
    jobs = await log.attempt_usage(ids, JOB_EXPERTS)
    without: list[float] = []
    with_log: list[float] = []
    costs: tuple[float, float] = (0.0, 0.0)
    for _ in range(rounds):
        started = time.perf_counter()
        plain = await build_report(orch.store)
        without.append(time.perf_counter() - started)
        started = time.perf_counter()
        full = await build_report(orch.store, audit=log)
        with_log.append(time.perf_counter() - started)
        costs = (plain.total.cost_usd, full.total.cost_usd)
    await orch.aclose()
    a, b = statistics.median(without), statistics.median(with_log)
    return {
        "conversations": conversations,
        "audit_rows": rows,
        "model_attempt_rows": attempts,
        "without_log_s": a,
        "with_log_s": b,
        "ratio": b / a,
        "resolved": full.total.resolved,
        "job_calls": sorted(e for calls in jobs.values() for e, _, _ in calls),
        "costs": costs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--db", default=None, help="a database URL (default: a SQLite file)")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as folder:
        url = args.db or f"sqlite:///{Path(folder) / 'report_audit.db'}"
        figures = asyncio.run(run(url, args.conversations, args.rounds))
    print(
        f"{figures['conversations']} conversations, {figures['audit_rows']} audit rows"
        f" ({figures['model_attempt_rows']} model attempts)\n"
        f"report without the audit log: {figures['without_log_s'] * 1000:.1f} ms (median)\n"
        f"report with it:               {figures['with_log_s'] * 1000:.1f} ms (median)\n"
        f"ratio: {figures['ratio']:.2f}x"
    )


if __name__ == "__main__":
    main()
