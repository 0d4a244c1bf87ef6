"""`frontdesk.db.run_read`: one read transaction of sync SQL, in one hop, beside the writes.

On SQLite it runs on a reader thread with a connection of its own (a WAL snapshot that
refuses writes), or at once on the event loop's thread when the loop is idle (the fast
path, on a connection of its own too; every test here runs both ways); on PostgreSQL in a
read transaction of the async engine. A turn's memory
lookup runs there, beside the start's write, so it must not wait for the writer.
"""

from __future__ import annotations

import asyncio
import threading
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import OperationalError

from frontdesk._driver import reader, writer
from frontdesk._driver.statement import driver_connection
from frontdesk.db import run_read, run_write
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True, params=["fast-path", "reader-thread"])
def read_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test twice: reads as an idle process makes them, and as under load."""
    if request.param == "reader-thread":
        monkeypatch.setattr(reader, "loop_idle", lambda: False)
    return str(request.param)


def _leaf(conn: Connection, conversation: str) -> tuple[str | None, str, bool]:
    leaf = conn.execute(
        sa.text("SELECT active_leaf_id FROM conversation WHERE id = :c"), {"c": conversation}
    ).scalar()
    return leaf, threading.current_thread().name, driver_connection(conn) is not None


async def test_a_read_sees_what_was_committed_on_its_own_thread(
    store: ConversationStore, read_path: str
) -> None:
    conversation = f"read-{uuid.uuid4().hex[:12]}"
    message, _ = await store.add_user_message(conversation, "hello")
    leaf, thread, on_driver = await run_read(store.engine, lambda c: _leaf(c, conversation))
    assert leaf == message.id
    if store.engine.dialect.name == "sqlite":
        # The reader's own thread (or, idle, this one), the prebuilt statements straight
        # on its driver.
        if read_path == "reader-thread":
            assert thread.startswith("frontdesk-read")
        else:
            assert thread == threading.current_thread().name
        assert on_driver
    else:
        assert thread == threading.current_thread().name and not on_driver


async def test_a_read_runs_while_a_write_holds_the_sqlite_writer(
    sqlite_store: ConversationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader never queues behind the writer: a read ends while a write is still open."""
    monkeypatch.setattr(writer, "_idle", lambda *_: False)  # The write on the writer thread.
    conversation = f"read-{uuid.uuid4().hex[:12]}"
    message, _ = await sqlite_store.add_user_message(conversation, "hello")
    writing, release = threading.Event(), threading.Event()

    def slow_write(conn: Connection) -> None:
        conn.execute(
            sa.text("UPDATE conversation SET active_leaf_id = NULL WHERE id = :c"),
            {"c": conversation},
        )
        writing.set()
        assert release.wait(10), "the read never ended"

    write = asyncio.ensure_future(run_write(sqlite_store.engine, slow_write))
    assert await asyncio.to_thread(writing.wait, 10)
    # The read's snapshot is the last commit: the open write's change is not in it.
    leaf, _, _ = await asyncio.wait_for(
        run_read(sqlite_store.engine, lambda c: _leaf(c, conversation)), 5
    )
    release.set()
    await write
    assert leaf == message.id
    after, _, _ = await run_read(sqlite_store.engine, lambda c: _leaf(c, conversation))
    assert after is None


async def test_the_sqlite_reader_refuses_a_write_and_keeps_reading(
    sqlite_store: ConversationStore,
) -> None:
    conversation = f"read-{uuid.uuid4().hex[:12]}"
    message, _ = await sqlite_store.add_user_message(conversation, "hello")

    def write(conn: Connection) -> None:
        conn.execute(sa.text("DELETE FROM conversation WHERE id = :c"), {"c": conversation})

    with pytest.raises(OperationalError, match="readonly"):
        await run_read(sqlite_store.engine, write)
    leaf, _, _ = await run_read(sqlite_store.engine, lambda c: _leaf(c, conversation))
    assert leaf == message.id  # Nothing was deleted, and the next read works.


async def test_a_reads_own_error_keeps_the_sqlite_readers_connection(
    sqlite_store: ConversationStore,
) -> None:
    """A read that raises its own error (a message not found) is rolled back and the
    reader keeps its connection; after a database error it starts on a new one."""
    from frontdesk.errors import MessageNotFound

    def connection(conn: Connection) -> Connection:
        return conn  # Held by the test: its address is never reused.

    first = await run_read(sqlite_store.engine, connection)
    with pytest.raises(MessageNotFound):
        await sqlite_store.get("no-such-message")
    assert await run_read(sqlite_store.engine, connection) is first

    def broken(conn: Connection) -> None:
        conn.execute(sa.text("SELECT * FROM no_such_table"))

    with pytest.raises(OperationalError):
        await run_read(sqlite_store.engine, broken)
    assert await run_read(sqlite_store.engine, connection) is not first
