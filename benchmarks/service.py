"""The HTTP service's cost: a turn through `frontdesk serve` against a direct `handle` call,
and turns per second with 4 uvicorn workers against 1.

Instant models (`FunctionModel`), so what is timed is frontdesk's own work plus, over HTTP,
FastAPI, uvicorn, JWT checking and the client's round trip (loopback, keep-alive):

- `overhead`: the same turns (10 conversations) through `Orchestrator.handle` in this
  process and as `POST /v1/conversations/{id}/messages` to `frontdesk serve --workers 1`
  (each on a store of its own), in alternating rounds of 10 turns so that the machine's
  load falls on both alike; p50 and mean per turn, and the difference. On a SQLite file
  and on PostgreSQL.
- `throughput`: `--clients` concurrent clients (one conversation each, new connections
  so either worker may take a request), `--turns` turns in all, against
  `frontdesk serve --workers 1` and `--workers 4` on PostgreSQL: turns per second, and
  the ratio.

    python -m benchmarks.service [--turns 200] [--clients 16] [--pg URL | --no-pg]

The machine running it matters: with 2 cores, 4 workers and the client share 2 cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import httpx
import structlog
from sqlalchemy.engine import make_url

from benchmarks.turns import PG_DEFAULT, _admin_dsn, _reachable
from frontdesk.orchestrator import Orchestrator
from frontdesk.service import mint_token

ROOT = Path(__file__).resolve().parents[1]
APP = "benchmarks._service_app:build"
TEXT = "a bag of purple please"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(db: str, workers: int, secret: str) -> Iterator[str]:
    """`frontdesk serve --workers N` on `db` until the block ends; yields its URL."""
    port = _free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FRONTDESK_JWT_SECRET": secret,
        "FRONTDESK_RATE_LIMIT": "off",
    }
    frontdesk = Path(sys.executable).parent / "frontdesk"
    args = [str(frontdesk), "serve", "--app", APP, "--db", db, "--workers", str(workers)]
    # In clear, as the direct `handle` it is compared with.
    args += ["--port", str(port), "--log-level", "warning", "--allow-clear-audit"]
    args += ["--allow-client-conversation-ids"]  # Its clients name their conversations.
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        seen: set[str] = set()
        while len(seen) < workers:  # every worker up (each answers on a new connection)
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"frontdesk serve did not start ({process.returncode})")
            try:
                r = httpx.get(f"{url}/readyz", timeout=5)
                if r.status_code == 200:
                    seen.add(r.headers["x-frontdesk-worker"])
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


async def interleaved(direct_db: str, url: str, turns: int, token: str) -> dict[str, Any]:
    """Seconds per turn through `handle` here and through HTTP, in alternating rounds of 10
    (so that a change in the machine's load falls on both alike)."""
    from benchmarks._service_app import build

    orch: Orchestrator = build(direct_db)
    await orch.open()
    headers = {"Authorization": f"Bearer {token}"}
    direct: list[float] = []
    over_http: list[float] = []
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:

            async def post(i: int) -> None:
                r = await client.post(
                    f"/v1/conversations/h{i % 10}/messages",
                    json={"text": TEXT},
                    headers={"Idempotency-Key": f"h-{i}"},
                )
                assert r.status_code == 200, r.text

            for i in range(10):  # warm-up: connections, first imports, first conversations
                await post(-1 - i)
                await orch.handle(f"d{i}", TEXT, user_id="bench", client_message_id=f"w-{i}")
            for i in range(turns):
                if (i // 10) % 2 == 0:
                    started = time.perf_counter()
                    await orch.handle(
                        f"d{i % 10}", TEXT, user_id="bench", client_message_id=f"d-{i}"
                    )
                    direct.append(time.perf_counter() - started)
                else:
                    started = time.perf_counter()
                    await post(i)
                    over_http.append(time.perf_counter() - started)
    finally:
        await orch.aclose()
    return {"direct": _ms(direct), "http": _ms(over_http)}


async def throughput(url: str, turns: int, clients: int, token: str) -> float:
    """Turns per second with `clients` concurrent clients, one conversation each."""
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=120, limits=limits
    ) as client:
        run = secrets.token_hex(4)

        async def one(c: int) -> None:
            for i in range(turns // clients):
                r = await client.post(
                    f"/v1/conversations/t{run}-{c}/messages",
                    json={"text": TEXT},
                    headers={"Idempotency-Key": f"{c}-{i}"},
                )
                assert r.status_code == 200, r.text

        started = time.perf_counter()
        await asyncio.gather(*(one(c) for c in range(clients)))
        return (turns // clients) * clients / (time.perf_counter() - started)


def _ms(values: list[float]) -> dict[str, float]:
    return {"p50": statistics.median(values) * 1000, "mean": statistics.fmean(values) * 1000}


@contextlib.contextmanager
def pg_databases(url: str, count: int) -> Iterator[list[str]]:
    """`count` fresh databases on the server of `url`, dropped afterwards."""
    names = [f"fd_bench_{secrets.token_hex(6)}" for _ in range(count)]

    async def admin(statements: list[str]) -> None:
        conn = await asyncpg.connect(_admin_dsn(url))
        try:
            for statement in statements:
                await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(admin([f'CREATE DATABASE "{n}"' for n in names]))
    try:
        yield [make_url(url).set(database=n).render_as_string(hide_password=False) for n in names]
    finally:
        asyncio.run(admin([f'DROP DATABASE IF EXISTS "{n}" WITH (FORCE)' for n in names]))


def measure(turns: int, clients: int, pg: str | None) -> dict[str, Any]:
    """Every figure (PostgreSQL's omitted when `pg` is None)."""
    secret = secrets.token_urlsafe(32)
    token = mint_token(secret, "bench", ttl=3600)
    figures: dict[str, Any] = {"turns": turns, "clients": clients}
    with tempfile.TemporaryDirectory() as tmp:
        with serving(f"sqlite:///{tmp}/http.db", 1, secret) as url:
            figures["sqlite"] = asyncio.run(
                interleaved(f"sqlite:///{tmp}/direct.db", url, turns, token)
            )
    if pg is None:
        return figures
    with pg_databases(pg, 3) as (direct_db, one_db, four_db):
        with serving(one_db, 1, secret) as url:
            figures["postgresql"] = asyncio.run(interleaved(direct_db, url, turns, token))
            one = asyncio.run(throughput(url, turns, clients, token))
        with serving(four_db, 4, secret) as url:
            asyncio.run(throughput(url, clients, clients, token))  # warm every worker
            four = asyncio.run(throughput(url, turns, clients, token))
    figures["throughput"] = {"workers_1": one, "workers_4": four, "ratio": four / one}
    return figures


def main(argv: list[str] | None = None) -> None:
    """Print the overhead table and the workers' throughput."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.service")
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--pg", default=os.environ.get("FRONTDESK_BENCH_PG_URL") or PG_DEFAULT)
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    pg: str | None = None if args.no_pg else args.pg
    if pg is not None and (why := asyncio.run(_reachable(pg))) is not None:
        print(f"PostgreSQL not reachable ({why}): its figures are skipped")
        pg = None
    load = os.getloadavg()[0]
    f = measure(args.turns, args.clients, pg)
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} before the run")
    print(f"{f['turns']} turns each, instant models, one client (keep-alive), 10 conversations")
    print(
        f"{'store':12} {'direct p50':>10} {'HTTP p50':>9} {'overhead':>9} {'direct mean':>11}"
        f" {'HTTP mean':>9}"
    )
    for store in ("sqlite", "postgresql"):
        if store not in f:
            continue
        d, h = f[store]["direct"], f[store]["http"]
        print(
            f"{store:12} {d['p50']:8.2f}ms {h['p50']:7.2f}ms {h['p50'] - d['p50']:+7.2f}ms"
            f" {d['mean']:9.2f}ms {h['mean']:7.2f}ms"
        )
    if "throughput" in f:
        t = f["throughput"]
        print(
            f"PostgreSQL, {f['clients']} concurrent clients: {t['workers_1']:.0f} turns/s with"
            f" 1 worker, {t['workers_4']:.0f} with 4 ({t['ratio']:.2f}x)"
        )


if __name__ == "__main__":
    main()
