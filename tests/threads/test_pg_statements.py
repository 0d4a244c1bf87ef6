"""`frontdesk._driver.Statement` on PostgreSQL: straight on asyncpg's DBAPI connection.

Inside a transaction a prebuilt statement skips SQLAlchemy's execution layer (half of a
statement's CPU). It must still read and write exactly what `Connection.execute` does (same
SQL, defaults and bind and result processing: timestamps, JSON, floats), fail with the same
typed errors (a lost connection invalidated, so the transaction runs again), honour a
read-only transaction, and step aside where SQLAlchemy must see the statement: outside a
transaction (autobegin) and while something listens to its cursor events.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Connection, event
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk import Orchestrator
from frontdesk._driver import Statement, savepoint
from frontdesk._driver.tx import run_sync_tx
from frontdesk.db import create_engine, dispose_engine
from frontdesk.experts.providers import FunctionModel
from tests.orchestrator.test_turn_statements import BILLING, model

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

_META = sa.MetaData()
_NOTE = sa.Table(
    "note",
    _META,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("body", sa.Text, nullable=False),
    sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("tags", sa.JSON, nullable=True),
    sa.Column("score", sa.Float, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False, server_default="plain"),
)
_INSERT = Statement(sa.insert(_NOTE), columns=["id", "body", "at", "tags", "score"])
_SELECT = Statement(
    sa.select(_NOTE.c.id, _NOTE.c.body, _NOTE.c.at, _NOTE.c.tags, _NOTE.c.score, _NOTE.c.kind)
    .where(_NOTE.c.body == sa.bindparam("body"))
    .order_by(_NOTE.c.id)
)
_RESCORE = Statement(
    sa.update(_NOTE).where(_NOTE.c.body == sa.bindparam("b")).values(score=sa.bindparam("s"))
)


def note(body: str, **values: Any) -> dict[str, Any]:
    return {
        "id": uuid.uuid4().hex,
        "body": body,
        "at": datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC),
        "tags": {"lang": "é", "n": [1, 2]},
        "score": 0.25,
        **values,
    }


@pytest.fixture
async def engine(fresh_pg_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(fresh_pg_url)
    async with engine.begin() as conn:
        await conn.run_sync(_META.create_all)
    try:
        yield engine
    finally:
        await dispose_engine(engine)


@contextmanager
def listened(engine: AsyncEngine) -> Iterator[list[str]]:
    """SQLAlchemy's cursor event on `engine`: what it is told while the block runs."""
    seen: list[str] = []

    def executed(conn: Any, cursor: Any, sql: str, *_: Any) -> None:
        seen.append(sql)

    event.listen(engine.sync_engine, "before_cursor_execute", executed)
    try:
        yield seen
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", executed)


async def test_the_driver_reads_and_writes_what_sqlalchemy_does(engine: AsyncEngine) -> None:
    def write_and_read(body: str) -> Any:
        def work(conn: Connection) -> tuple[int, list[dict[str, Any]]]:
            rows = [note(body, id=f"{body}-1"), note(body, id=f"{body}-2", tags=None, score=1.5)]
            _INSERT.run_many(conn, rows)
            _INSERT.run(conn, note(body, id=f"{body}-3", at=datetime(2027, 1, 2, tzinfo=UTC)))
            changed = _RESCORE.run(conn, {"b": body, "s": 2.0})
            return changed, _SELECT.rows(conn, {"body": body})

        return work

    async with engine.begin() as conn:
        fast = await conn.run_sync(write_and_read("fast"))
    with listened(engine) as seen:  # Now SQLAlchemy runs the same statements.
        async with engine.begin() as conn:
            slow = await conn.run_sync(write_and_read("slow"))
    assert len(seen) == 4, "with a listener, SQLAlchemy ran (and showed) every statement"
    assert fast[0] == slow[0] == 3

    def same(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**row, "id": row["id"][-1], "body": None} for row in rows]

    assert same(fast[1]) == same(slow[1]) and len(fast[1]) == 3
    first = fast[1][0]
    assert first["at"] == datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC)
    assert first["tags"] == {"lang": "é", "n": [1, 2]} and first["kind"] == "plain"
    assert [row["tags"] is None for row in fast[1]] == [False, True, False]
    async with engine.begin() as conn:
        one = await conn.run_sync(lambda c: _SELECT.first(c, {"body": "fast"}))
        none = await conn.run_sync(lambda c: _SELECT.first(c, {"body": "nothing"}))
    assert one is not None and one["score"] == 2.0 and none is None


async def test_no_statement_of_a_warm_turn_goes_through_sqlalchemys_execute(
    fresh_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    through: list[str] = []
    execute = Connection.execute

    def counted(self: Connection, statement: Any, *args: Any, **kwargs: Any) -> Any:
        through.append(type(statement).__name__)
        return execute(self, statement, *args, **kwargs)

    orch = Orchestrator([BILLING], store=fresh_pg_url, model=FunctionModel(model), memory=False)
    try:
        for i in range(3):
            await orch.handle("conv", f"refund A-{i}", client_message_id=f"m-{i}")
        monkeypatch.setattr(Connection, "execute", counted)
        await orch.handle("conv", "refund A-3", client_message_id="m-3")
    finally:
        monkeypatch.undo()
        await orch.aclose()
    assert through == [], "every statement (the lookup's savepoint too) ran on the driver"


async def test_a_duplicate_is_sqlalchemys_integrity_error_and_the_rest_stays(
    engine: AsyncEngine,
) -> None:
    row = note("dup")

    def twice(conn: Connection) -> None:
        _INSERT.run(conn, row)
        with conn.begin_nested():
            _INSERT.run(conn, row)

    with pytest.raises(IntegrityError) as caught:
        async with engine.begin() as conn:
            await conn.run_sync(twice)
    assert getattr(caught.value.orig, "sqlstate", None) == "23505"
    assert row["id"] not in str(caught.value), "parameters stay hidden"

    def kept(conn: Connection) -> int:
        _INSERT.run(conn, row)
        try:
            with conn.begin_nested():
                _INSERT.run(conn, row)
        except IntegrityError:
            pass
        return len(_SELECT.rows(conn, {"body": "dup"}))

    assert await run_sync_tx(engine, kept) == 1


async def test_a_step_that_fails_in_a_savepoint_loses_only_its_own_writes(
    engine: AsyncEngine,
) -> None:
    def steps(conn: Connection) -> list[str]:
        _INSERT.run(conn, note("kept", id="k-1"))
        with pytest.raises(IntegrityError), savepoint(conn):
            _INSERT.run(conn, note("kept", id="k-2"))  # Rolled back with the failure.
            _INSERT.run(conn, note("kept", id="k-1"))
        with savepoint(conn):
            _INSERT.run(conn, note("kept", id="k-3"))
        return [row["id"] for row in _SELECT.rows(conn, {"body": "kept"})]

    with listened(engine) as seen:
        async with engine.connect() as conn:
            assert await conn.run_sync(lambda c: _SELECT.rows(c, {"body": "kept"})) == []
    assert seen, "the listener sees statements SQLAlchemy runs"
    async with engine.begin() as conn:
        assert await conn.run_sync(steps) == ["k-1", "k-3"]
    async with engine.begin() as conn:
        rows = await conn.run_sync(lambda c: _SELECT.rows(c, {"body": "kept"}))
    assert [row["id"] for row in rows] == ["k-1", "k-3"], "the transaction went on and committed"


async def test_a_connection_lost_in_a_savepoint_runs_the_transaction_again(
    engine: AsyncEngine,
) -> None:
    calls: list[int] = []
    end = Statement(sa.select(sa.func.pg_terminate_backend(sa.func.pg_backend_pid())))

    def write(conn: Connection) -> int:
        calls.append(1)
        _INSERT.run(conn, note("saved", id=f"s-{len(calls)}"))
        with savepoint(conn):
            if len(calls) == 1:
                end.run(conn, {})
        return len(calls)

    assert await run_sync_tx(engine, write) == 2
    async with engine.begin() as conn:
        rows = await conn.run_sync(lambda c: _SELECT.rows(c, {"body": "saved"}))
    assert [row["id"] for row in rows] == ["s-2"]


async def test_a_connection_lost_under_a_statement_runs_the_transaction_again(
    engine: AsyncEngine,
) -> None:
    calls: list[int] = []

    def write(conn: Connection) -> int:
        calls.append(1)
        _INSERT.run(conn, note("once", id="n-1"))
        if len(calls) == 1:  # The server ends this connection before the next statement.
            with pytest.raises(DBAPIError) as lost:
                Statement(sa.select(sa.func.pg_terminate_backend(sa.func.pg_backend_pid()))).run(
                    conn, {}
                )
            assert lost.value.connection_invalidated
            raise lost.value
        return len(calls)

    assert await run_sync_tx(engine, write) == 2
    async with engine.begin() as conn:
        rows = await conn.run_sync(lambda c: _SELECT.rows(c, {"body": "once"}))
    assert [r["id"] for r in rows] == ["n-1"], "the lost attempt rolled back; the retry wrote it"


async def test_a_read_only_transaction_refuses_a_write_on_the_driver(
    engine: AsyncEngine,
) -> None:
    """The driver begins the transaction SQLAlchemy set up (here READ ONLY) lazily, at the
    first statement, whichever path runs it."""
    async with engine.connect() as conn:
        await conn.execution_options(postgresql_readonly=True)
        await conn.begin()
        with pytest.raises(DBAPIError) as refused:
            await conn.run_sync(lambda c: _INSERT.run(c, note("ro")))
    assert getattr(refused.value.orig, "sqlstate", None) == "25006"  # read_only_sql_transaction


async def test_outside_a_transaction_sqlalchemy_begins_it_and_commit_keeps_the_write(
    engine: AsyncEngine,
) -> None:
    async with engine.connect() as conn:
        assert await conn.run_sync(lambda c: _INSERT.run(c, note("autobegun"))) == 1
        assert conn.in_transaction()
        await conn.commit()
    async with engine.begin() as conn:
        rows = await conn.run_sync(lambda c: _SELECT.rows(c, {"body": "autobegun"}))
    assert len(rows) == 1
