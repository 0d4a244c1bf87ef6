"""`frontdesk.db.run_write`: one write transaction of sync SQL, in one hop on SQLite.

On SQLite it runs on a sync engine over the same file, on a thread of its own, or at once
on the event loop's thread when the process is idle (the fast path, `_driver.writer._Inline`);
on PostgreSQL in the async engine's transaction. All commit on return and roll back on raise.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import Connection

from frontdesk._driver import writer
from frontdesk.db import create_engine, dispose_engine, run_write, writes_to
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


def conv_id() -> str:
    """A conversation id no other test uses (the PostgreSQL database is shared)."""
    return f"fast-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("idle", [True, False], ids=["fast-path", "writer-thread"])
async def test_a_write_commits_on_return_and_rolls_back_on_raise(
    store: ConversationStore, idle: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not idle:  # As under load: the writes queue for the writer thread.
        monkeypatch.setattr(writer, "_idle", lambda *_: False)
    conversation = conv_id()
    first, _ = await store.add_user_message(conversation, "kept")

    def leaf_to(message_id: str, fail: bool) -> Callable[[Connection], str]:
        def work(conn: Connection) -> str:
            conn.execute(
                sa.text("UPDATE conversation SET active_leaf_id = :m WHERE id = :c"),
                {"m": message_id, "c": conversation},
            )
            if fail:
                raise RuntimeError("refused")
            return threading.current_thread().name

        return work

    second, _ = await store.add_user_message(conversation, "next")
    with pytest.raises(RuntimeError, match="refused"):
        await run_write(store.engine, leaf_to(first.id, fail=True))
    assert (await store.active_leaf(conversation)) == second
    where = await run_write(store.engine, leaf_to(first.id, fail=False))
    assert (await store.active_leaf(conversation)) == first
    if store.engine.dialect.name == "sqlite" and not idle:
        assert where.startswith("frontdesk-sqlite")  # One hop to the database's own thread.
    else:
        # PostgreSQL: the async engine's run_sync. SQLite, idle: the fast path, no hop.
        assert where == threading.current_thread().name


async def test_the_connection_is_of_the_engines_database(store: ConversationStore) -> None:
    def check(conn: Connection) -> bool:
        return writes_to(conn, store.engine)

    assert await run_write(store.engine, check)
    other = create_engine(store.url)
    try:
        assert not await run_write(other, lambda conn: writes_to(conn, store.engine))
    finally:
        await dispose_engine(other)


async def test_concurrent_writers_of_one_process_never_lose_an_update(tmp_path: Path) -> None:
    # Read-modify-write from many tasks: serialised, so the count is exact.
    engine = create_engine(f"sqlite:///{tmp_path / 'count.db'}")
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE counter (n INTEGER)"))
            await conn.execute(sa.text("INSERT INTO counter VALUES (0)"))

        def bump(conn: Connection) -> None:
            n = conn.execute(sa.text("SELECT n FROM counter")).scalar_one()
            conn.execute(sa.text("UPDATE counter SET n = :n"), {"n": n + 1})

        async def writer() -> None:
            for _ in range(20):
                await run_write(engine, bump)
                # The async engine's writers share the same queue (frontdesk.db.write_slot).
                async with engine.begin() as conn:
                    n = (await conn.execute(sa.text("SELECT n FROM counter"))).scalar_one()
                    await conn.execute(sa.text("UPDATE counter SET n = :n"), {"n": n + 1})

        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(writer)
        assert (
            await run_write(
                engine, lambda c: c.execute(sa.text("SELECT n FROM counter")).scalar_one()
            )
            == 400
        )
    finally:
        await dispose_engine(engine)


async def test_a_cancelled_caller_waits_for_the_transaction_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "_idle", lambda *_: False)  # On the writer thread.
    engine = create_engine(f"sqlite:///{tmp_path / 'cancel.db'}")
    started = threading.Event()
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (v INTEGER)"))

        def slow(conn: Connection) -> None:
            started.set()
            conn.execute(sa.text("INSERT INTO t VALUES (1)"))
            threading.Event().wait(0.2)

        task = asyncio.ensure_future(run_write(engine, slow))
        await anyio.to_thread.run_sync(started.wait)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # By the time the cancellation arrived, the transaction had ended (committed).
        async with engine.connect() as conn:
            assert (await conn.execute(sa.text("SELECT count(*) FROM t"))).scalar_one() == 1
    finally:
        await dispose_engine(engine)


def _thread_name(conn: Connection) -> str:
    return threading.current_thread().name


async def test_a_write_with_other_work_ready_queues_for_the_writer_thread(
    tmp_path: Path,
) -> None:
    """The fast path is for an idle process only: with a callback ready to run, the write
    is queued (and grouped with the writes that queue meanwhile)."""
    engine = create_engine(f"sqlite:///{tmp_path / 'ready.db'}")
    try:
        assert await run_write(engine, _thread_name) == threading.current_thread().name
        asyncio.get_running_loop().call_soon(lambda: None)
        assert (await run_write(engine, _thread_name)).startswith("frontdesk-sqlite")
    finally:
        await dispose_engine(engine)


async def test_a_write_lock_held_by_another_connection_sends_the_write_to_the_thread(
    tmp_path: Path,
) -> None:
    """The fast path never waits for SQLite's write lock on the event loop: while another
    connection (another process) holds it, the write waits on the writer thread, and the
    loop keeps running."""
    path = tmp_path / "held.db"
    engine = create_engine(f"sqlite:///{path}")
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (v INTEGER)"))
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO t VALUES (1)")

        def add_two(conn: Connection) -> str:
            conn.execute(sa.text("INSERT INTO t VALUES (2)"))
            return threading.current_thread().name

        write = asyncio.ensure_future(run_write(engine, add_two))
        ticks = 0
        for _ in range(5):  # The loop is not blocked while the write waits.
            await asyncio.sleep(0.02)
            ticks += 1
        assert ticks == 5 and not write.done()
        other.execute("COMMIT")
        assert (await asyncio.wait_for(write, 10)).startswith("frontdesk-sqlite")
        rows = await run_write(engine, lambda c: c.execute(sa.text("SELECT v FROM t")).all())
        assert sorted(v for (v,) in rows) == [1, 2]
    finally:
        other.close()
        await dispose_engine(engine)
