"""The SQLite reader thread: a read transaction in one hop, beside the writer's.

The async SQLite driver crosses to its thread three or four times per statement, and its
SQLAlchemy layer costs more than a turn's small reads themselves; the writer thread runs
only writes, so a read placed inside a write transaction holds the one writer while it
runs. A reader runs whole read transactions (a WAL snapshot, `BEGIN`) on a thread and
connection of its own, in one hop, with the prebuilt statements straight on the driver;
SQLite runs it while the writer writes (a turn's memory lookup beside its first write).
`frontdesk.db.run_read` is the public door; this module is the SQLite side of it.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._sqlite.writer import sync_twin

__all__ = ["dispose", "run"]

T = TypeVar("T")


def _query_only(dbapi_connection: Any, _record: Any) -> None:
    """The reader's connection refuses every write (SQLite's `query_only`): a write sent to
    the reader by mistake fails at once instead of taking the writer's lock."""
    dbapi_connection.execute("PRAGMA query_only=ON")


class _Reader:
    """One thread and its kept pysqlite connection, running read transactions in turn."""

    def __init__(self, engine: AsyncEngine) -> None:
        # `frontdesk_readonly`: the connection hook begins with a plain `BEGIN` (a snapshot
        # that never waits for a writer), not the writer's `BEGIN IMMEDIATE`.
        self.engine = sync_twin(engine, frontdesk_readonly=True)
        event.listen(self.engine, "connect", _query_only)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="frontdesk-read")
        self.conn: Connection | None = None
        self.closed = False

    def read(self, work: Callable[[Connection], T]) -> T:
        """On the reader thread: `work` in one read transaction (a failure drops the
        connection, so the next read starts on a fresh one)."""
        if self.conn is None:
            self.conn = self.engine.connect()
        try:
            with self.conn.begin():
                return work(self.conn)
        except BaseException:
            self.drop()
            raise

    def drop(self) -> None:
        """Close the kept connection (a broken one is discarded by the pool)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                conn.invalidate()

    def shut(self) -> None:
        """On the reader thread: close its connection, then the engine's pool."""
        self.drop()
        self.engine.dispose()

    def close(self) -> None:
        """Close the connection on its own thread, then let the thread end."""
        if self.closed:
            return
        self.closed = True
        try:
            self.executor.submit(self.shut)
        except RuntimeError:  # The interpreter is exiting: the thread has ended already.
            pass
        self.executor.shutdown(wait=False)


_readers: weakref.WeakKeyDictionary[Engine, _Reader] = weakref.WeakKeyDictionary()


def _reader(engine: AsyncEngine) -> _Reader:
    reader = _readers.get(engine.sync_engine)
    if reader is None or reader.closed:
        reader = _Reader(engine)
        _readers[engine.sync_engine] = reader
        # An engine dropped without `dispose_engine` still frees the thread and connection.
        weakref.finalize(engine.sync_engine, reader.close)
    return reader


async def run(engine: AsyncEngine, work: Callable[[Connection], T]) -> T:
    """Run `work` in a read transaction of `engine` (SQLite) on its reader thread. A
    cancelled caller's read still runs to its end (it changes nothing)."""
    reader = _reader(engine)
    loop = asyncio.get_running_loop()
    result: T = await loop.run_in_executor(reader.executor, reader.read, work)
    return result


async def dispose(engine: AsyncEngine) -> None:
    """Close `engine`'s reader connection and thread, after the reads queued there."""
    reader = _readers.pop(engine.sync_engine, None)
    if reader is None or reader.closed:
        return
    reader.closed = True
    await asyncio.get_running_loop().run_in_executor(reader.executor, reader.shut)
    reader.executor.shutdown(wait=False)
