"""Audit overhead: what writing one turn's audit batch costs on the reply path.

Two measurements on a SQLite file (and PostgreSQL with `--pg URL`):

1. `append`: one turn's batch of 8 events (turn_started, 3 model attempts with their
   system prompts and messages, triage, request, outcome, reply) appended with
   `AuditLog.append`, 300 turns over 30 conversations; median and p95 ms per batch.
2. `turn`: full `Orchestrator.handle` turns with instant `FunctionModel` experts, auditing
   on vs off (`audit=False`), 150 turns each; the median difference is the overhead.
3. `size`: the audit tables' bytes per 1,000 turns on the turn benchmark's workload (its
   instant models and category, a user id, one conversation of `--size-turns` turns,
   scaled to 1,000), payloads in clear and encrypted; SQLite by `dbstat` (every page of
   each table and its indexes), PostgreSQL by `pg_total_relation_size` (table, indexes,
   TOAST).

    python -m benchmarks.audit [--turns 300] [--size-turns 300] [--pg postgresql+asyncpg://...]
    python -m benchmarks.audit --size-only [--pg URL]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks.turns import BILLING, _model, _user_message, pg_database
from frontdesk.audit.crypto import MasterKey
from frontdesk.audit.events import AuditEvent
from frontdesk.audit.store import AuditLog
from frontdesk.db import create_engine
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

SYSTEM = "You are an expert of a customer-service team. " * 40  # ~2 kB, like the real prompts
TEXT = "I'd like to buy a bag of purple potatoes, please, delivered tomorrow."


def turn_batch(turn_id: str, history: int) -> list[AuditEvent]:
    """One turn's 8 events, with `history` earlier messages in each attempt's payload."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": TEXT} for i in range(history)
    ] + [{"role": "user", "content": TEXT}]
    usage = {
        "input_tokens": 900,
        "output_tokens": 40,
        "cache_read_tokens": 600,
        "cache_write_tokens": 0,
    }

    def attempt(expert: str, output: Any) -> AuditEvent:
        return AuditEvent(
            kind="model_attempt",
            turn_id=turn_id,
            system_prompt=SYSTEM + expert,
            payload={
                "expert": expert,
                "model": "anthropic:claude-sonnet-4-5",
                "attempt": 1,
                "latency_ms": 420.0,
                "messages": messages,
                "usage": usage,
                "status_code": 200,
                "output": output,
                "response_body": {"content": [{"text": str(output)}]},
                "provider_request_id": "req_" + turn_id,
            },
        )

    return [
        AuditEvent(kind="turn_started", turn_id=turn_id, payload={"text": TEXT}),
        attempt("triage", {"category": "ORDERS", "reason": "buying"}),
        AuditEvent(kind="triage", turn_id=turn_id, payload={"category": "ORDERS"}),
        attempt("request", {"request": {"variety": "purple", "bags": 1}}),
        AuditEvent(kind="request", turn_id=turn_id, payload={"request": {"bags": 1}}),
        AuditEvent(kind="outcome", turn_id=turn_id, payload={"instruction": "Ask to confirm"}),
        attempt("response", "Ok great, please press confirm."),
        AuditEvent(kind="reply", turn_id=turn_id, payload={"text": "Ok great"}),
    ]


def _stats(ms: list[float]) -> str:
    p95 = statistics.quantiles(ms, n=20)[18]
    return f"median {statistics.median(ms):.2f} ms, p95 {p95:.2f} ms (n={len(ms)})"


async def bench_append_pg(url: str, turns: int) -> list[float]:
    """`bench_append` in a fresh PostgreSQL schema, dropped afterwards."""
    schema = f"bench_audit_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url)
    async with admin.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine = create_engine(url, connect_args={"server_settings": {"search_path": schema}})
    try:
        return await bench_append(engine, turns)
    finally:
        await engine.dispose()
        async with admin.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()


async def bench_append(url: str | AsyncEngine, turns: int) -> list[float]:
    """Milliseconds per 8-event batch."""
    log = await AuditLog.open(url)
    convs = [f"bench-{uuid.uuid4().hex[:8]}" for _ in range(30)]
    times = []
    try:
        for i in range(turns):
            batch = turn_batch(f"t{i}", history=2 * (i // len(convs)))
            start = time.perf_counter()
            await log.append(convs[i % len(convs)], batch)
            times.append((time.perf_counter() - start) * 1000)
    finally:
        await log.aclose()
    return times


def _answer(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "ORDERS", "reason": "buying"}
    if request.expert == "request":
        return {"request": {"variety": "purple", "bags": 1}, "need_more_info": None}
    return "Ok great, please press confirm to buy one bag of purple potatoes."


async def bench_turns(folder: Path, audit: bool, turns: int) -> list[float]:
    """Milliseconds per full turn (instant models), auditing on or off."""
    orch = Orchestrator(
        categories(),
        model=FunctionModel(_answer),
        audit=audit,
        store=f"sqlite:///{folder / f'turns-{audit}.db'}",
    )
    times = []
    try:
        await orch.open()
        for i in range(turns):
            start = time.perf_counter()
            await orch.handle(f"c{i % 30}", f"{TEXT} ({i})", client_message_id=f"m{i}")
            times.append((time.perf_counter() - start) * 1000)
    finally:
        await orch.aclose()
    return times


AUDIT_TABLES = ("audit_event", "audit_head", "audit_prompt", "audit_key", "audit_blob")
"""The tables the audit log owns (`audit_blob` from migration `0014_audit_blobs` on)."""


async def _sqlite_table_bytes(engine: AsyncEngine) -> dict[str, int]:
    """Bytes of each audit table with its indexes (`dbstat`: every page it owns)."""
    async with engine.connect() as conn:
        indexes = (
            await conn.execute(text("SELECT name, tbl_name FROM sqlite_master WHERE type='index'"))
        ).all()
        owner: dict[str, str] = {str(name): str(table) for name, table in indexes}
        pages = (
            await conn.execute(text("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
        ).all()
    out: dict[str, int] = {}
    for name, size in pages:
        table = owner.get(name, name)
        if table in AUDIT_TABLES:
            out[table] = out.get(table, 0) + int(size)
    return out


async def _pg_table_bytes(engine: AsyncEngine) -> dict[str, int]:
    """Bytes of each audit table (`pg_total_relation_size`: table, indexes and TOAST)."""
    out: dict[str, int] = {}
    async with engine.connect() as conn:
        for table in AUDIT_TABLES:
            size = (
                await conn.execute(
                    text("SELECT pg_total_relation_size(to_regclass(:t))"), {"t": table}
                )
            ).scalar()
            if size is not None:
                out[table] = int(size)
    return out


async def audit_size(store: str, turns: int, *, encrypted: bool) -> dict[str, Any]:
    """The audit tables' size after `turns` turns of one conversation, per 1,000 turns."""
    key = MasterKey.generate() if encrypted else None
    orch = Orchestrator([BILLING], model=FunctionModel(_model), store=store, audit_key=key)
    try:
        for i in range(1, turns + 1):
            await orch.handle(
                "conv-size", _user_message(i), user_id="u-size", client_message_id=f"m-{i}"
            )
    finally:
        await orch.aclose()  # Waits for the background memory and compaction work.
    engine = create_engine(store)
    try:
        if engine.dialect.name == "postgresql":
            tables = await _pg_table_bytes(engine)
        else:
            tables = await _sqlite_table_bytes(engine)
    finally:
        await engine.dispose()
    scale = 1000 / turns / 2**20
    return {
        "turns": turns,
        "encrypted": encrypted,
        "tables_mb_per_1000": {t: round(b * scale, 3) for t, b in sorted(tables.items())},
        "audit_mb_per_1000": round(sum(tables.values()) * scale, 2),
    }


async def run_size(turns: int, pg: str | None) -> list[str]:
    """The size lines: SQLite (and PostgreSQL), clear and encrypted."""
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for encrypted in (False, True):
            db = f"sqlite:///{Path(tmp) / f'size-{encrypted}.db'}"
            lines.append(_size_line("SQLite", await audit_size(db, turns, encrypted=encrypted)))
    if pg:
        for encrypted in (False, True):
            async with pg_database(pg) as db:
                figures = await audit_size(db, turns, encrypted=encrypted)
            lines.append(_size_line("PostgreSQL", figures))
    return lines


def _size_line(backend: str, figures: dict[str, Any]) -> str:
    mode = "encrypted" if figures["encrypted"] else "in clear"
    parts = ", ".join(f"{t} {mb:.2f}" for t, mb in figures["tables_mb_per_1000"].items())
    return (
        f"audit tables per 1,000 turns, {backend}, {mode}: {figures['audit_mb_per_1000']:.2f} MB"
        f" ({parts}; {figures['turns']} turns scaled)"
    )


async def run(turns: int, pg: str | None, size_turns: int = 300, size_only: bool = False) -> None:
    """Print the measurements."""
    for line in await run_size(size_turns, pg):
        print(line)
    if size_only:
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sqlite_append = await bench_append(f"sqlite:///{folder / 'audit.db'}", turns)
        print(f"append 8-event batch, SQLite:     {_stats(sqlite_append)}")
        if pg:
            print(f"append 8-event batch, PostgreSQL: {_stats(await bench_append_pg(pg, turns))}")
        half = max(turns // 2, 20)
        off = await bench_turns(folder, False, half)
        on = await bench_turns(folder, True, half)
        print(f"full turn, audit off, SQLite:     {_stats(off)}")
        print(f"full turn, audit on,  SQLite:     {_stats(on)}")
        delta = statistics.median(on) - statistics.median(off)
        print(f"audit overhead per turn (median on - median off): {delta:.2f} ms")


def main(argv: list[str] | None = None) -> None:
    """`python -m benchmarks.audit [--turns N] [--size-turns N] [--size-only] [--pg URL]`."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.audit")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--pg", default=None, help="Also measure on this PostgreSQL URL.")
    parser.add_argument("--size-turns", type=int, default=300)
    parser.add_argument("--size-only", action="store_true", help="Only the size measurement.")
    args, _ = parser.parse_known_args(argv)
    asyncio.run(run(args.turns, args.pg, args.size_turns, args.size_only))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
