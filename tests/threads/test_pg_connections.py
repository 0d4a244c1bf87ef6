"""PostgreSQL connections the server ends (a restart, a failover, `pg_terminate_backend`).

The engine does not ping a pooled connection at checkout (on asyncpg that costs three round
trips each time, docs/benchmarks.md); a connection the server closed is refused by a check
that costs none, and a connection lost during a transaction fails it as invalidated, and
the transaction runs again from its start. Either way the caller sees its work done once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk._driver.statement import Statement
from frontdesk._driver.tx import run_sync_tx
from frontdesk.db import create_engine, dispose_engine
from frontdesk.experts.providers import FunctionModel, ModelRequest
from tests._pg import terminate_backends

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture
async def engine(fresh_pg_url: str) -> AsyncIterator[AsyncEngine]:
    """The store's engine on a fresh database, with a table to write to."""
    engine = create_engine(fresh_pg_url)
    async with engine.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE note (id serial PRIMARY KEY, body text)"))
    try:
        yield engine
    finally:
        await dispose_engine(engine)


def _pid(conn: Connection) -> int:
    return int(conn.execute(sa.text("SELECT pg_backend_pid(), pg_sleep(0.02)")).scalar_one())


async def test_pooled_connections_the_server_ended_are_replaced_without_a_retry(
    engine: AsyncEngine, fresh_pg_url: str
) -> None:
    calls: list[int] = []

    def work(conn: Connection) -> int:
        calls.append(1)
        return _pid(conn)

    before = await asyncio.gather(*(run_sync_tx(engine, work) for _ in range(5)))
    assert await terminate_backends(fresh_pg_url) >= len(set(before))
    await asyncio.sleep(0.1)  # The closed sockets reach the event loop.
    calls.clear()
    after = await asyncio.gather(*(run_sync_tx(engine, work, attempts=1) for _ in range(5)))
    assert len(calls) == 5, "each transaction ran once: no dead connection was handed out"
    assert not set(after) & set(before)


async def test_a_connection_lost_during_a_transaction_runs_it_again_once(
    engine: AsyncEngine,
) -> None:
    calls: list[int] = []

    def write(conn: Connection) -> int:
        calls.append(1)
        conn.execute(sa.text("INSERT INTO note (body) VALUES ('once')"))
        if len(calls) == 1:  # The server ends this connection before the commit.
            conn.execute(sa.text("SELECT pg_terminate_backend(pg_backend_pid())"))
        return len(calls)

    assert await run_sync_tx(engine, write) == 2
    async with engine.connect() as conn:
        bodies = (await conn.execute(sa.text("SELECT body FROM note"))).scalars().all()
    assert bodies == ["once"], "the lost attempt rolled back; the retry wrote it once"


class Refund(BaseModel):
    order_id: str


async def refund(request: BaseModel, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Say the refund is on its way.")


def _model(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "BILLING", "reason": "test"}
    if request.expert == "request":
        return {"request": {"order_id": "A-1"}}
    return "Noted."


async def test_turns_go_on_after_the_server_ends_every_connection(fresh_pg_url: str) -> None:
    billing = Category(name="BILLING", description="Refunds", request=Refund, handler=refund)
    # `jobs="worker"`: this test is about the store's pool. An in-process job runner's own
    # connection (Procrastinate's, psycopg) ended while it records a job's status fails
    # that job's bookkeeping, a fault of its own (not the turn's), and is left to it.
    orch = Orchestrator(
        [billing], store=fresh_pg_url, model=FunctionModel(_model), memory=False, jobs="worker"
    )
    try:
        for i in range(3):
            await orch.handle("conv-1", f"question {i}", client_message_id=f"m-{i}")
            await terminate_backends(fresh_pg_url)
            await asyncio.sleep(0.05)
        reply = await orch.handle("conv-1", "question 3", client_message_id="m-3")
        assert reply.text == "Noted."
        thread = await orch.user_thread("conv-1")
        roles = [m.role for m in thread.messages]
        assert roles == ["user", "assistant"] * 4, "each message stored once, alternating"
    finally:
        await orch.aclose()


_COUNT = Statement(sa.text("SELECT count(*) AS n FROM note"))


async def test_a_read_cancelled_at_any_point_leaves_its_pooled_connection_clean(
    fresh_pg_url: str,
) -> None:
    """A caller cancelled while its statement ran on the driver (a turn's memory read
    beside a start that failed) must not hand the next caller a connection still inside
    its transaction: that caller's writes would go to a savepoint never committed, or fail
    as "current transaction is aborted". One pooled connection, cancelled at every step."""
    engine = create_engine(fresh_pg_url, pool_size=1, max_overflow=0)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE note (id serial PRIMARY KEY, body text)"))
        steps = 80
        for step in range(steps):
            read = asyncio.ensure_future(
                run_sync_tx(engine, lambda conn: _COUNT.rows(conn, {}), readonly=True)
            )
            for _ in range(step % 40):
                await asyncio.sleep(0)
            read.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await read

            def write(conn: Connection, body: str = str(step)) -> None:
                conn.execute(sa.text("INSERT INTO note (body) VALUES (:b)"), {"b": body})

            await run_sync_tx(engine, write)
    finally:
        await dispose_engine(engine)  # An open transaction left on it is rolled back here.
    afterwards = create_engine(fresh_pg_url)
    try:
        async with afterwards.connect() as conn:
            written = (await conn.execute(sa.text("SELECT count(*) FROM note"))).scalar_one()
    finally:
        await dispose_engine(afterwards)
    assert written == steps, "every write committed"
