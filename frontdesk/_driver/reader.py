"""The SQLite reader thread: a read transaction in one hop, beside the writer's.

The async SQLite driver crosses to its thread three or four times per statement, and its
SQLAlchemy layer costs more than a turn's small reads themselves; the writer thread runs
only writes, so a read placed inside a write transaction holds the one writer while it
runs. A reader runs whole read transactions (a WAL snapshot, `BEGIN`) on a thread and
connection of its own, in one hop, with the prebuilt statements straight on the driver;
SQLite runs it while the writer writes (a turn's memory lookup beside its first write).
`frontdesk.db.run_read` is the public door; this module is the SQLite side of it.

As for writes (`writer.py`), a read that finds the event loop idle runs at once on the
loop's thread, on a read connection of its own, instead of paying two thread wake-ups:
a snapshot never waits for a writer, so it cannot block the loop on a lock.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver.writer import (
    KeptConnection,
    LoopOwned,
    ThreadOwned,
    loop_idle,
    one_per_engine,
)

__all__ = ["dispose", "run"]

T = TypeVar("T")


def _query_only(dbapi_connection: Any, _record: Any) -> None:
    """The reader's connection refuses every write (SQLite's `query_only`): a write sent to
    the reader by mistake fails at once instead of taking the writer's lock."""
    dbapi_connection.execute("PRAGMA query_only=ON")


class _Reader(ThreadOwned):
    """One thread and its kept pysqlite connection, running read transactions in turn."""

    def __init__(self, engine: AsyncEngine) -> None:
        # `frontdesk_readonly`: the connection hook begins with a plain `BEGIN` (a snapshot
        # that never waits for a writer), not the writer's `BEGIN IMMEDIATE`.
        super().__init__(engine, "frontdesk-read", frontdesk_readonly=True)
        event.listen(self.engine, "connect", _query_only)

    def read(self, work: Callable[[Connection], T]) -> T:
        """On the reader thread: `work` in one read transaction (`_read_in`)."""
        return _read_in(self, work)


class _InlineReader(LoopOwned):
    """The reader's fast path: a read transaction run at once on the event loop's thread,
    on a connection of its own (`query_only`, as the reader's)."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine, frontdesk_readonly=True)
        event.listen(self.engine, "connect", _query_only)

    def read(self, work: Callable[[Connection], T]) -> tuple[bool, T | None]:
        """`(True, what work returned)`, or `(False, None)` when another loop's read holds
        the connection (nothing ran). Errors as `_Reader.read`."""
        if not self.lock.acquire(blocking=False):
            return False, None
        try:
            return True, _read_in(self, work)
        finally:
            self.lock.release()


def _read_in(owner: KeptConnection, work: Callable[[Connection], T]) -> T:
    """`work` in one read transaction of `owner`'s kept connection, rolled back when it
    raises. A database error drops the connection (the next read starts on a fresh one);
    `work`'s own error (a message not found) keeps it, as the writer keeps its connection
    after a job's own error."""
    conn = owner.connection()
    try:
        with conn.begin():
            return work(conn)
    except DBAPIError:
        owner.drop_connection()
        raise


_readers: weakref.WeakKeyDictionary[Engine, _Reader] = weakref.WeakKeyDictionary()
_inlines: weakref.WeakKeyDictionary[Engine, _InlineReader] = weakref.WeakKeyDictionary()


def _inline(engine: AsyncEngine) -> _InlineReader:
    return one_per_engine(_inlines, engine, lambda: _InlineReader(engine))


async def run(engine: AsyncEngine, work: Callable[[Connection], T]) -> T:
    """Run `work` in a read transaction of `engine` (SQLite) on its reader thread, or at
    once on this thread when the loop is idle. A cancelled caller's read still runs to its
    end (it changes nothing)."""
    if loop_idle():
        ran, value = _inline(engine).read(work)
        if ran:
            return value  # type: ignore[return-value]
    reader = one_per_engine(_readers, engine, lambda: _Reader(engine))
    loop = asyncio.get_running_loop()
    result: T = await loop.run_in_executor(reader.executor, reader.read, work)
    return result


async def dispose(engine: AsyncEngine) -> None:
    """Close `engine`'s reader connections and thread, after the reads queued there."""
    inline = _inlines.pop(engine.sync_engine, None)
    if inline is not None:
        inline.close()
    reader = _readers.pop(engine.sync_engine, None)
    if reader is not None:
        await reader.aclose()
