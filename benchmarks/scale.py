"""Figures at a bank's scale (not in `make test`; heavy: run it with `nice -n 10`).

- `knowledge`: one full-text passage lookup (`FullTextPassageRetriever.retrieve`, its own
  read transaction) with 1,000, 10,000 and 100,000 passages (the help pages' sentences
  recombined, `benchmarks.knowledge`), median over the 68 labelled questions, on a SQLite
  file and on PostgreSQL.
- `memory`: one user's recall (`orch.memory.recall`, what a turn's lookup reads) with 100,
  1,000 and 10,000 facts (`benchmarks.memory`), on SQLite and PostgreSQL.
- `store`: a warm turn (instant models, turns 6-15 of a new conversation, median) on
  PostgreSQL with `--messages` messages already in the store (default 10 million: 1 million
  conversations of 10 alternating messages, 100,000 users, generated in SQL with
  `generate_series` in a database of its own, dropped afterwards), against the same turn on
  an empty database, alternating rounds. `--keep-db NAME` generates them in a database of
  that name and keeps it; `--reuse-db NAME` measures against it later without generating
  (generation takes about half an hour).
- `sse`: `--clients` (default 1,000) concurrent clients, each its own connection, each
  sending one message with `Accept: text/event-stream` to `frontdesk serve --workers 2`
  (PostgreSQL, instant models): the serving processes' resident memory before and with
  every stream open (per connection), and each client's delay from sending to its first
  event and to its last (p50/p95); the 503s with `Retry-After` (the admission limit's
  `ServiceBusy`) apart, with their time to answer, and with `--retries N` each refused
  client sends again after Retry-After.

    nice -n 10 python -m benchmarks.scale [--parts knowledge,memory,store,sse]
        [--messages 10000000] [--keep-db NAME | --reuse-db NAME] [--clients 1000]
        [--retries 0] [--pg URL | --no-pg]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import secrets
import statistics
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine

from benchmarks import knowledge as kb
from benchmarks import memory as mem
from benchmarks.service import serving
from benchmarks.turns import (
    BILLING,
    PG_DEFAULT,
    REPLY,
    _admin_dsn,
    _model,
    _reachable,
    _user_message,
    pg_database,
)
from frontdesk.experts.providers import FunctionModel
from frontdesk.orchestrator import Orchestrator
from frontdesk.service import mint_token
from frontdesk.threads.knowledge import FullTextPassageRetriever, KnowledgeStore
from frontdesk.threads.store import ConversationStore

PARTS = ("knowledge", "memory", "store", "sse")

# -- knowledge and memory -----------------------------------------------------------------


@contextlib.asynccontextmanager
async def _sqlite(folder: Path, name: str) -> AsyncIterator[str]:
    yield f"sqlite:///{folder / name}.db"


async def knowledge(url_for: Callable[[str], Any], sizes: list[int]) -> dict[int, float]:
    """Milliseconds of one passage lookup per number of passages."""
    pages, questions = kb.labelled_set()
    out = {}
    for size in sizes:
        async with url_for(f"knowledge-{size}") as url:
            conversations = await ConversationStore.open(url)
            try:
                store = KnowledgeStore(conversations.engine)
                await kb._seed(store, kb._synthetic(size, pages))
                await _analyze(conversations.engine, "knowledge_passage")
                out[size] = await kb.lookup_ms(FullTextPassageRetriever(store), questions)
            finally:
                await conversations.aclose()
    return out


async def _analyze(engine: AsyncEngine, table: str) -> None:
    """On PostgreSQL, the planner's statistics of `table` after a bulk load (what autovacuum
    does within a minute of one): without them it reads a whole table's index to find a
    handful of rows."""
    if engine.dialect.name == "postgresql":
        async with engine.begin() as conn:
            await conn.execute(sa.text(f"ANALYZE {table}"))


async def memory(url_for: Callable[[str], Any], sizes: list[int]) -> dict[int, float]:
    """Milliseconds of one user's recall per number of that user's facts."""
    out = {}
    for size in sizes:
        async with url_for(f"memory-{size}") as url:
            orch = Orchestrator([BILLING], model=FunctionModel(_model), store=url)
            await orch.open()
            try:
                await mem._seed(orch, size)
                await _analyze(orch.store.engine, "memory")
                for q in mem.QUESTIONS:  # Warm-up.
                    await orch.memory.recall(mem.USER, q)
                times = []
                for i in range(40):
                    started = time.perf_counter()
                    await orch.memory.recall(mem.USER, mem.QUESTIONS[i % len(mem.QUESTIONS)])
                    times.append((time.perf_counter() - started) * 1000)
                out[size] = statistics.median(times)
            finally:
                await orch.aclose()
    return out


# -- a turn beside 10 million messages -----------------------------------------------------

GENERATE = """
INSERT INTO conversation (id, user_id, created_at, metadata, active_leaf_id, profile,
                          resolution)
SELECT 'g' || c, 'gu' || (c % 100000), now() - interval '30 days', '{{}}',
       md5('m' || c || '-9'), 'default', 'open'
FROM generate_series({low}, {high}) AS c;
INSERT INTO message (id, conversation_id, parent_id, role, content, created_at, token_count,
                     kind, author, model)
SELECT md5('m' || c || '-' || i), 'g' || c,
       CASE WHEN i = 0 THEN NULL ELSE md5('m' || c || '-' || (i - 1)) END,
       CASE WHEN i % 2 = 0 THEN 'user' ELSE 'assistant' END,
       CASE WHEN i % 2 = 0 THEN 'Turn ' || i || ': I was charged twice for order A-' || c
            || ', could you please check it and tell me what to do next?'
            ELSE 'Thanks, I have checked your account; the refund is on its way.' END,
       now() - interval '30 days' + i * interval '1 minute', 30, 'message',
       CASE WHEN i % 2 = 0 THEN 'user' ELSE 'bot' END,
       CASE WHEN i % 2 = 0 THEN NULL ELSE 'function' END
FROM generate_series({low}, {high}) AS c, generate_series(0, 9) AS i;
"""


async def fill(url: str, messages: int, batch: int = 100_000) -> float:
    """Put `messages` messages (10 per conversation) in the database of `url`, in batches
    of `batch` conversations; seconds taken. Foreign-key triggers are off while loading
    (`session_replication_role = replica`: the generated rows satisfy them by
    construction); the indexes are maintained as for any insert. The server process
    doing the work is reniced to 10, as the benchmark itself is."""
    conn = await asyncpg.connect(_dsn(url))
    started = time.perf_counter()
    try:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, pid, 10)
        await conn.execute("SET session_replication_role = replica")
        conversations = messages // 10
        for low in range(1, conversations + 1, batch):
            high = min(low + batch - 1, conversations)
            await conn.execute(GENERATE.format(low=low, high=high))
        await conn.execute("SET session_replication_role = DEFAULT")
        await conn.execute("ANALYZE conversation; ANALYZE message")
    finally:
        await conn.close()
    return time.perf_counter() - started


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def _turn_ms(url: str, run: str, turns: int = 15) -> list[float]:
    orch = Orchestrator([BILLING], model=FunctionModel(_model), store=url)
    times = []
    try:
        for i in range(1, turns + 1):
            started = time.perf_counter()
            reply = await orch.handle(f"scale-{run}", _user_message(i), client_message_id=f"m{i}")
            times.append((time.perf_counter() - started) * 1000)
            assert reply.text == REPLY, reply.text
    finally:
        await orch.aclose()
    return times[5:]


async def _size(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(_dsn(url))
    try:
        return {
            "messages": await conn.fetchval("SELECT count(*) FROM message"),
            "db_gb": await conn.fetchval("SELECT pg_database_size(current_database())") / 2**30,
        }
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def _full_database(
    server: str, keep: str | None, reuse: str | None
) -> AsyncIterator[tuple[str, bool]]:
    """The database that holds the generated messages, and whether it still needs filling:
    a fresh one dropped afterwards; `keep`: a new database of that name, left in place;
    `reuse`: an existing one (filled by an earlier `--keep-db`), left in place."""
    if keep is None and reuse is None:
        async with pg_database(server) as url:
            yield url, True
        return
    name = keep if keep is not None else reuse
    assert name is not None
    admin = await asyncpg.connect(_admin_dsn(server))
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if keep is not None:
            if exists:
                raise SystemExit(
                    f"database {name!r} already exists: measure it with --reuse-db {name},"
                    " or keep the new one under another name"
                )
            await admin.execute(f'CREATE DATABASE "{name}"')
        elif not exists:
            raise SystemExit(f"no database {name!r} to reuse: create it with --keep-db {name}")
    finally:
        await admin.close()
    yield (
        make_url(server).set(database=name).render_as_string(hide_password=False),
        keep is not None,
    )


async def store(
    server: str,
    messages: int,
    rounds: int,
    *,
    keep: str | None = None,
    reuse: str | None = None,
) -> dict[str, Any]:
    """Turn 10 (ms) on an empty database and on one holding `messages` messages (`keep`:
    generate them in a database of that name and leave it; `reuse`: measure the messages
    already in that database, generating none)."""
    async with pg_database(server) as empty, _full_database(server, keep, reuse) as (full, new):
        for url in (empty, full):  # The schema (the first open migrates).
            await _turn_ms(url, "schema", turns=1)
        seconds = await fill(full, messages) if new else None
        size = await _size(full)
        times: dict[str, list[float]] = {"empty": [], "full": []}
        run = secrets.token_hex(3)  # A reused database keeps the earlier runs' conversations.
        for r in range(rounds):
            for name, url in (("empty", empty), ("full", full)):
                times[name] += await _turn_ms(url, f"{name}-{run}-{r}")
        plans = await _plans(full)
    return {
        "fill_s": seconds,
        **size,
        "empty_ms": statistics.median(times["empty"]),
        "full_ms": statistics.median(times["full"]),
        "plans": plans,
    }


async def _plans(url: str) -> dict[str, str]:
    """How PostgreSQL reads a conversation's thread and a client message id, with the
    store full (the top line of each plan)."""
    conn = await asyncpg.connect(_dsn(url))
    try:
        out = {}
        for name, sql in {
            "thread": "SELECT * FROM message WHERE conversation_id = 'g4242' ORDER BY created_at",
            "idempotency": "SELECT id FROM message WHERE conversation_id = 'g4242'"
            " AND client_message_id = 'x'",
            "user's conversations": "SELECT id FROM conversation WHERE user_id = 'gu42'",
        }.items():
            rows = await conn.fetch(f"EXPLAIN {sql}")
            out[name] = " / ".join(r[0].strip() for r in rows[:2])
        return out
    finally:
        await conn.close()


# -- 1,000 concurrent SSE clients ----------------------------------------------------------


def _rss_mb(root: int) -> float:
    """Resident memory (MB) of process `root` and its children (the serving workers)."""
    out = subprocess.run(
        ["ps", "-o", "pid=,ppid=,rss=", "-A"], capture_output=True, text=True, check=True
    ).stdout
    rows = [tuple(int(x) for x in line.split()) for line in out.splitlines() if line.strip()]
    family, total, grew = {root}, 0, True
    while grew:
        grew = False
        for pid, ppid, _ in rows:
            if ppid in family and pid not in family:
                family.add(pid)
                grew = True
    for pid, _, rss in rows:
        if pid in family:
            total += rss
    return total / 1024


async def _sse_clients(
    url: str, token: str, clients: int, root: int, retries: int = 0
) -> dict[str, Any]:
    """Each client sends one message as SSE; a 503 with `Retry-After` (the admission
    limit's `ServiceBusy`, or a worker's connection cap) is counted apart, with the time it
    took, and with `retries` the client sends the same message again (same
    Idempotency-Key) after Retry-After, up to `retries` times."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    limits = httpx.Limits(max_connections=clients + 10, max_keepalive_connections=0)
    timeout = httpx.Timeout(300.0, connect=120.0, pool=300.0)
    first: list[float] = []
    last: list[float] = []
    failed: list[str] = []
    refused: list[float] = []  # seconds from sending to a 503 with Retry-After
    refused_as: list[str] = []  # its body's `type`
    answered_after: dict[int, int] = {}  # per completed client: how many sends it took
    run = secrets.token_hex(3)
    peak = {"rss": 0.0}

    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=timeout) as client:

        async def attempt(c: int, started: float, sends: int) -> float | None:
            """One send: `None` when answered (or failed for good), else the Retry-After."""
            sent = time.perf_counter()
            try:
                async with client.stream(
                    "POST",
                    f"/v1/conversations/s{run}-{c}/messages",
                    json={"text": "a bag of purple please"},
                    headers={**headers, "Idempotency-Key": f"s-{c}"},
                ) as response:
                    if response.status_code == 503 and "retry-after" in response.headers:
                        body = json.loads(await response.aread() or b"{}")
                        refused.append(time.perf_counter() - sent)
                        refused_as.append(str(body.get("type")))
                        return float(response.headers["retry-after"])
                    seen = response.status_code != 200  # An error's body is no event.
                    async for line in response.aiter_lines():
                        if line.startswith("event:") and not seen:
                            seen = True
                            first.append(time.perf_counter() - started)
                    if response.status_code == 200:
                        last.append(time.perf_counter() - started)
                        answered_after[c] = sends
                    else:
                        failed.append(str(response.status_code))
            except httpx.HTTPError as e:
                failed.append(type(e).__name__)
            return None

        async def one(c: int) -> None:
            started = time.perf_counter()
            for tries in range(1, retries + 2):
                wait = await attempt(c, started, tries)
                if wait is None:
                    return
                if tries <= retries:
                    await asyncio.sleep(wait)

        async def watch() -> None:
            while True:
                peak["rss"] = max(peak["rss"], _rss_mb(root))
                await asyncio.sleep(0.5)

        watcher = asyncio.create_task(watch())
        started = time.perf_counter()
        await asyncio.gather(*(one(c) for c in range(clients)))
        wall = time.perf_counter() - started
        watcher.cancel()

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if values else 0.0

    return {
        "completed": len(last),
        "failed": len(failed),
        "errors": {e: failed.count(e) for e in sorted(set(failed))},
        "retries": retries,
        "refused": len(refused),
        "refused_as": {t: refused_as.count(t) for t in sorted(set(refused_as))},
        "refused_p50_ms": pct(refused, 0.5),
        "refused_p95_ms": pct(refused, 0.95),
        "refused_max_ms": max(refused, default=0.0) * 1000,
        "sends_per_completed": statistics.mean(answered_after.values()) if answered_after else 0.0,
        "first_event_p50_ms": pct(first, 0.5),
        "first_event_p95_ms": pct(first, 0.95),
        "last_event_p50_ms": pct(last, 0.5),
        "last_event_p95_ms": pct(last, 0.95),
        "peak_rss_mb": peak["rss"],
        "wall_s": wall,
    }


def sse(server: str, clients: int, retries: int = 0) -> dict[str, Any]:
    """`clients` concurrent SSE turns against `frontdesk serve --workers 2` on PostgreSQL."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, clients * 4 + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # The children inherit it.
    secret = secrets.token_urlsafe(32)
    token = mint_token(secret, "scale", ttl=3600)

    async def made() -> str:
        name = f"fd_scale_{secrets.token_hex(6)}"
        conn = await asyncpg.connect(_admin_dsn(server))
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return name

    async def drop(name: str) -> None:
        conn = await asyncpg.connect(_admin_dsn(server))
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    name = asyncio.run(made())
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    try:
        with serving(url, 2, secret) as base, _server_pid(base) as root:
            idle = _rss_mb(root)
            # Warm each worker (imports, pools) with a few plain turns first.
            asyncio.run(_sse_clients(base, token, 8, root))
            warm = _rss_mb(root)
            figures = asyncio.run(_sse_clients(base, token, clients, root, retries))
    finally:
        asyncio.run(drop(name))
    figures.update(
        clients=clients,
        idle_rss_mb=idle,
        warm_rss_mb=warm,
        per_connection_kb=(figures["peak_rss_mb"] - warm) * 1024 / clients,
    )
    return figures


@contextlib.contextmanager
def _server_pid(url: str) -> Any:
    """The pid of the `frontdesk serve` process listening at `url` (its workers are its
    children)."""
    port = url.rsplit(":", 1)[1]
    out = subprocess.run(["ss", "-ltnpH", f"sport = :{port}"], capture_output=True, text=True)
    pids = [int(p.split("=")[1].split(",")[0]) for p in out.stdout.split() if "pid=" in p]
    if not pids:
        raise RuntimeError(f"no process listens on port {port}")
    yield _root_of(pids[0])


def _root_of(pid: int) -> int:
    """The serving family's top process (uvicorn's supervisor) from one of its workers."""
    parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    command = Path(f"/proc/{parent}/cmdline").read_bytes()
    return parent if b"frontdesk" in command or b"uvicorn" in command else pid


# -- report -------------------------------------------------------------------------------


def report(figures: dict[str, Any]) -> str:
    """The scale table (Markdown)."""
    lines = ["| what | size | backend | figure |", "|---|---:|---|---|"]
    for part, label in (("knowledge", "passage lookup"), ("memory", "one user's recall")):
        for backend, by in figures.get(part, {}).items():
            for size, ms in by.items():
                lines.append(f"| {label} | {int(size):,} | {backend} | {ms:.2f} ms |")
    if "store" in figures:
        s = figures["store"]
        filled = "reused" if s["fill_s"] is None else f"filled in {s['fill_s']:.0f} s"
        lines.append(f"| turn 10, empty store | 0 | PostgreSQL | {s['empty_ms']:.2f} ms |")
        lines.append(
            f"| turn 10, full store | {s['messages']:,} messages ({s['db_gb']:.1f} GB) |"
            f" PostgreSQL | {s['full_ms']:.2f} ms ({s['full_ms'] / s['empty_ms']:.2f}x;"
            f" {filled}) |"
        )
    if "sse" in figures:
        e = figures["sse"]
        lines.append(
            f"| SSE turns at once, `--workers 2` | {e['clients']:,} clients | PostgreSQL |"
            f" {e['completed']:,} completed, {e['failed']} failed {e['errors']},"
            f" {e['refused']} answered 503 + Retry-After {e['refused_as']} (p50"
            f" {e['refused_p50_ms']:.0f} ms, p95 {e['refused_p95_ms']:.0f} ms, max"
            f" {e['refused_max_ms']:.0f} ms; retries {e['retries']}, sends per completed"
            f" {e['sends_per_completed']:.2f}); first event p50"
            f" {e['first_event_p50_ms']:.0f} ms, p95 {e['first_event_p95_ms']:.0f} ms; last"
            f" event p50 {e['last_event_p50_ms']:.0f} ms, p95 {e['last_event_p95_ms']:.0f} ms;"
            f" memory {e['warm_rss_mb']:.0f} -> {e['peak_rss_mb']:.0f} MB"
            f" ({e['per_connection_kb']:.0f} kB per connection) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the chosen parts; print the table and write the figures as JSON (`--out`)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--clients", type=int, default=1_000)
    parser.add_argument(
        "--retries", type=int, default=0, help="sse: resend after a 503's Retry-After"
    )
    parser.add_argument("--rounds", type=int, default=3)
    names = parser.add_mutually_exclusive_group()
    names.add_argument(
        "--keep-db",
        metavar="NAME",
        help="store: generate the messages in a new database NAME and keep it afterwards",
    )
    names.add_argument(
        "--reuse-db",
        metavar="NAME",
        help="store: measure against database NAME (kept by --keep-db) without generating",
    )
    parser.add_argument("--knowledge-sizes", default="1000,10000,100000")
    parser.add_argument("--memory-sizes", default="100,1000,10000")
    parser.add_argument("--pg", default=os.environ.get("FRONTDESK_BENCH_PG_URL", PG_DEFAULT))
    parser.add_argument("--no-pg", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    pg = None if args.no_pg else args.pg
    if pg is not None and (problem := asyncio.run(_reachable(pg))) is not None:
        parser.error(f"PostgreSQL at --pg is not reachable: {problem} (or pass --no-pg)")
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="fd-bench-scale-") as tmp:
        folder = Path(tmp)

        def sqlite(name: str) -> Any:
            return _sqlite(folder, name)

        def postgres(name: str) -> Any:
            assert pg is not None
            return pg_database(pg)

        backends: list[tuple[str, Callable[[str], Any]]] = [("SQLite", sqlite)]
        if pg is not None:
            backends.append(("PostgreSQL", postgres))
        for part, run, sizes in (
            ("knowledge", knowledge, args.knowledge_sizes),
            ("memory", memory, args.memory_sizes),
        ):
            if part in parts:
                counts = [int(s) for s in sizes.split(",") if s]
                figures[part] = {name: asyncio.run(run(u, counts)) for name, u in backends}
                print(report({part: figures[part]}), flush=True)
    if "store" in parts and pg is not None:
        figures["store"] = asyncio.run(
            store(pg, args.messages, args.rounds, keep=args.keep_db, reuse=args.reuse_db)
        )
        print(report({"store": figures["store"]}), json.dumps(figures["store"]["plans"]))
    if "sse" in parts and pg is not None:
        figures["sse"] = sse(pg, args.clients, args.retries)
        print(report({"sse": figures["sse"]}), flush=True)
    print(report(figures))
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2, default=str))


if __name__ == "__main__":
    main()
