"""`frontdesk report` at scale: a month of generated conversations, written straight into
the tables (no turns run), then the report read over them, timed, with its peak memory.

    python -m benchmarks.report [--conversations 100000] [--db URL] [--html FILE]

Each conversation has a user message, the bot's answer and the turn's outcome with usage
(three experts on `anthropic:claude-haiku-4-5`); a quarter have a rating, one in five a
hand-off. Its resolution follows its number (`expected` says the counts), so the report's
totals can be checked against the generator.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from frontdesk.orchestrator.report import build_report, render_html
from frontdesk.orchestrator.resolution import variant_of
from frontdesk.threads.models import Conversation, FeedbackRow, HandoffRow, Message, TurnOutcomeRow
from frontdesk.threads.store import ConversationStore

START = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 30
BATCH = 5000
CATEGORIES = ("ORDER", "REFUND", "DELIVERY", "OTHER", "HUMAN")
MODEL = "anthropic:claude-haiku-4-5"
USAGE = {
    "triage": {"input_tokens": 800, "output_tokens": 20},
    "request": {"input_tokens": 900, "output_tokens": 40},
    "response": {"input_tokens": 1200, "output_tokens": 80},
}


def resolution_of(i: int) -> tuple[str, str | None]:
    """The resolution of conversation `i`, and by whom."""
    if CATEGORIES[i % 5] == "HUMAN":
        return ("resolved", "operator") if i % 10 < 5 else ("handed_off", None)
    return (
        ("resolved", "handler"),
        ("resolved", "customer"),
        ("assumed_resolved", "timeout"),
        ("abandoned", "timeout"),
        ("open", None),
        ("assumed_resolved", "timeout"),
    )[i % 6]


def expected(n: int) -> dict[str, int]:
    """The counts a report over conversations 0..n-1 must give."""
    counts = {"conversations": n, "resolved": 0, "assumed_resolved": 0, "handed_off": 0}
    for i in range(n):
        resolution, _ = resolution_of(i)
        if resolution in ("resolved", "assumed_resolved"):
            counts[resolution] += 1
        counts["handed_off"] += CATEGORIES[i % 5] == "HUMAN"
    return counts


def _rows(i: int, n: int) -> dict[str, list[dict[str, Any]]]:
    cid = f"bench-{i:07d}"
    at = START + timedelta(seconds=DAYS * 86400 * i / n)
    question, answer = f"q{i:031d}", f"a{i:031d}"
    resolution, by = resolution_of(i)
    category = CATEGORIES[i % 5]
    rows: dict[str, list[dict[str, Any]]] = {
        "conversation": [
            {
                "id": cid,
                "user_id": f"u{i % 5000}",
                "created_at": at,
                "metadata": {},
                "active_leaf_id": answer,
                "resolution": resolution,
                "resolved_at": None if by is None else at + timedelta(minutes=5),
                "resolved_by": by,
            }
        ],
        "message": [
            _message(question, cid, None, "user", "hello", at, "user", None),
            _message(
                answer,
                cid,
                question,
                "assistant",
                "ok",
                at + timedelta(seconds=2),
                "bot",
                {"variant": variant_of(cid, ["a", "b"])},
            ),
        ],
        "turn_outcome": [
            {
                "user_message_id": question,
                "conversation_id": cid,
                "category": category,
                "request": None,
                "need_more_info": None,
                "instruction": "x",
                "data": {},
                "handler_ran": category not in ("OTHER", "HUMAN"),
                "handoff": "asked for a person" if category == "HUMAN" else None,
                "handler_failed": False,
                "usage": USAGE,
                "models": dict.fromkeys(USAGE, MODEL),
                "created_at": at,
                "sources": None,
                "resolves": by == "handler",
            }
        ],
        "feedback": [],
        "handoff": [],
    }
    if i % 4 == 0:
        rows["feedback"].append(
            {
                "message_id": answer,
                "conversation_id": cid,
                "user_id": f"u{i % 5000}",
                "rating": i % 5 + 1,
                "comment": "thanks" if i % 12 == 0 else None,
                "created_at": at + timedelta(minutes=1),
            }
        )
    if category == "HUMAN":
        opened = at + timedelta(seconds=2)
        rows["handoff"].append(
            {
                "id": f"h{i:031d}",
                "conversation_id": cid,
                "reason": "asked for a person",
                "opened_at": opened,
                "waiting_since": None,
                "closed_at": opened + timedelta(seconds=60 + i % 240) if by else None,
                "closed_by": "operator" if by else None,
                "operator_id": "sam" if by else None,
                "claimed_by": None,
                "claimed_at": None,
            }
        )
    return rows


def _message(
    mid: str,
    cid: str,
    parent: str | None,
    role: str,
    content: str,
    at: datetime,
    author: str,
    versions: dict[str, str] | None,
) -> dict[str, Any]:
    return {
        "id": mid,
        "conversation_id": cid,
        "parent_id": parent,
        "role": role,
        "content": content,
        "created_at": at,
        "token_count": 1,
        "client_message_id": None,
        "model": None,
        "prompt_versions": versions,
        "kind": "message",
        "author": author,
    }


TABLES = {
    "conversation": Conversation.__table__,  # type: ignore[attr-defined]
    "message": Message.__table__,  # type: ignore[attr-defined]
    "turn_outcome": TurnOutcomeRow.__table__,  # type: ignore[attr-defined]
    "feedback": FeedbackRow.__table__,  # type: ignore[attr-defined]
    "handoff": HandoffRow.__table__,  # type: ignore[attr-defined]
}


async def generate(store: ConversationStore, n: int) -> float:
    """Write `n` conversations in batches of INSERTs; the seconds it took."""
    began = time.perf_counter()
    for first in range(0, n, BATCH):
        batch: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
        for i in range(first, min(n, first + BATCH)):
            for name, rows in _rows(i, n).items():
                batch[name].extend(rows)
        async with store.engine.begin() as conn:
            for name, table in TABLES.items():  # Parents first: the foreign keys hold.
                if batch[name]:
                    await conn.execute(sa.insert(table), batch[name])
    async with store.engine.begin() as conn:  # The statistics autovacuum keeps on a live store.
        await conn.execute(sa.text("ANALYZE"))
    return time.perf_counter() - began


async def run(url: str, n: int) -> dict[str, Any]:
    """Generate `n` conversations into an empty database at `url`, then time the report
    (its HTML page is `html` in the figures)."""
    store = await ConversationStore.open(url)
    try:
        generated = await generate(store, n)
        began = time.perf_counter()
        report = await build_report(store, by_variant=True)
        seconds = time.perf_counter() - began
        page = render_html(report)
    finally:
        await store.aclose()
    total = report.total.as_json()
    return {
        "conversations": total["conversations"],
        "generate_seconds": round(generated, 2),
        "report_seconds": round(seconds, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "total": total,
        "html": page,
    }


def main() -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--conversations", type=int, default=2000)
    parser.add_argument("--db", help="An EMPTY database URL (default: a temporary SQLite file).")
    parser.add_argument("--html", type=Path, help="Also write the HTML report here.")
    args = parser.parse_args([] if __name__ != "__main__" else None)
    with tempfile.TemporaryDirectory() as folder:
        url = args.db or f"sqlite:///{Path(folder) / 'report.db'}"
        figures = asyncio.run(run(url, args.conversations))
    if args.html is not None:
        args.html.write_text(figures["html"])
    t = figures.pop("total")
    print(
        f"{figures['conversations']} conversations: generated in {figures['generate_seconds']} s,"
        f" report in {figures['report_seconds']} s, peak RSS {figures['peak_rss_mib']} MiB;"
        f" resolution rate {t['resolution_rate']:.3f}, cost per resolution"
        f" ${t['cost_per_resolution']:.5f}"
    )


if __name__ == "__main__":
    main()
