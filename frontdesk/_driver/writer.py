"""The SQLite writer thread: every write of a process's SQLite database, group-committed.

The async SQLite driver crosses to its thread three or four times per statement; a writer
runs whole write transactions in one hop to a thread of its own, batching the writes that
queue up meanwhile into one transaction (`_FastWriter`). `frontdesk.db.run_write` is the
public door; this module is the SQLite side of it.

When nothing else is waiting, a hop to the writer costs more than the write: the thread
must be woken, then the event loop (about 150 us on a 2-core VM, half of what a warm turn's
three writes cost in all). So a write that finds the process idle (no other callback
ready to run, no write queued, the database's write lock free) runs at once on the event
loop's thread instead (`_Inline`), without waiting for the lock: a database another
process is writing sends it to the writer as before. Under load the loop always has
work ready, so the writes queue and keep their group commit.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import sqlalchemy
from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver.jsontext import dumps

__all__ = [
    "KeptConnection",
    "LoopOwned",
    "ThreadOwned",
    "dispose",
    "install_hooks",
    "loop_idle",
    "one_per_engine",
    "owns",
    "run",
    "sync_twin",
    "write_slot",
]

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for another writer before the driver gives up."""


def install_hooks(engine: Engine) -> None:
    """WAL, the busy timeout and foreign keys on every connection; `BEGIN IMMEDIATE` on writes."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Hand transaction control to the "begin" hook below instead of the driver.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        _use_wal(cursor)
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        # Deleted rows are overwritten, not left in free pages: a forgotten memory's text
        # is gone from the file once the WAL is checkpointed.
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # A read-only transaction is a WAL snapshot, never blocked by writers.
        readonly = connection.get_execution_options().get("frontdesk_readonly")
        sql = "BEGIN" if readonly else "BEGIN IMMEDIATE"
        driver = connection.connection.dbapi_connection
        if not isinstance(driver, sqlite3.Connection):  # The async driver's adapter.
            connection.exec_driver_sql(sql)
            return
        # The writer thread's own connection: straight on the driver, without SQLAlchemy's
        # execution around it (a third of a small transaction's cost), its error wrapped
        # as SQLAlchemy would (a busy database is retried as transient).
        try:
            driver.execute(sql)
        except sqlite3.Error as e:
            raise DBAPIError.instance(sql, None, e, sqlite3.Error) from e


def _use_wal(cursor: Any) -> None:
    """Switch the file to WAL (it stays so). The switch takes an exclusive lock, and SQLite
    answers "database is locked" at once, without its busy handler, to a connection that
    tries it while another holds the file (several stores opening a new file together):
    such a connection waits a little and tries again, within the busy timeout."""
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def sync_twin(
    engine: AsyncEngine, connect_args: dict[str, Any] | None = None, **options: Any
) -> Engine:
    """A sync pysqlite engine over `engine`'s file, with its settings and execution options
    (and `options`): what the writer and the reader threads run their transactions on."""
    url = engine.url.set(drivername="sqlite")
    twin = sqlalchemy.create_engine(
        url,
        pool_reset_on_return=None,
        hide_parameters=True,
        json_serializer=dumps,
        connect_args=connect_args or {},
    )
    install_hooks(twin)
    options = {**engine.get_execution_options(), **options}
    return twin.execution_options(**options) if options else twin


class KeptConnection:
    """A sync twin engine (`sync_twin`) and the one connection kept on it from transaction
    to transaction (a checkout and a check-in each cost as much as a BEGIN and a COMMIT)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.conn: Connection | None = None
        """The kept connection; dropped after a failure."""

    def connection(self) -> Connection:
        """The kept connection, opened when there is none."""
        if self.conn is None:
            self.conn = self.engine.connect()
        return self.conn

    def drop_connection(self) -> None:
        """Close the kept connection (after a failure the next one starts on a new one)."""
        conn, self.conn = self.conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # A broken connection: the pool discards it either way.
                conn.invalidate()


class ThreadOwned(KeptConnection):
    """A kept connection and the one thread that uses it (pysqlite's same-thread check:
    the thread owns it). The writer and the reader are each one of these."""

    def __init__(self, engine: AsyncEngine, thread_name: str, **options: Any) -> None:
        super().__init__(sync_twin(engine, **options))
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self.closed = False

    def shut(self) -> None:
        """On the thread: close its connection, then the engine's pool."""
        self.drop_connection()
        self.engine.dispose()

    def close(self) -> None:
        """Close the pooled connection on its own thread, then let the thread end."""
        if self.closed:
            return
        self.closed = True
        try:
            self.executor.submit(self.shut)
        except RuntimeError:
            # The interpreter is exiting (an engine never disposed): the executor's thread
            # has already ended, and the committed file outlives the connection.
            pass
        self.executor.shutdown(wait=False)

    async def aclose(self) -> None:
        """Close the connection on its thread, after the work queued there, and end it."""
        if self.closed:
            return
        self.closed = True
        await asyncio.get_running_loop().run_in_executor(self.executor, self.shut)
        self.executor.shutdown(wait=False)


class _Closable(Protocol):
    closed: bool

    def close(self) -> None: ...


Owned = TypeVar("Owned", bound=_Closable)


def one_per_engine(
    registry: weakref.WeakKeyDictionary[Engine, Owned],
    engine: AsyncEngine,
    make: Callable[[], Owned],
) -> Owned:
    """`engine`'s entry of `registry`, made anew when missing or closed; an engine dropped
    without `dispose_engine` still frees its thread and connection."""
    owned = registry.get(engine.sync_engine)
    if owned is None or owned.closed:
        owned = make()
        registry[engine.sync_engine] = owned
        weakref.finalize(engine.sync_engine, owned.close)
    return owned


_write_locks: weakref.WeakKeyDictionary[Engine, tuple[asyncio.AbstractEventLoop, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


@asynccontextmanager
async def write_slot(engine: AsyncEngine) -> AsyncIterator[None]:
    """Queue this process's SQLite write transactions on an asyncio lock.

    SQLite has one writer at a time. Without this, concurrent tasks of one process would
    all issue `BEGIN IMMEDIATE` and wait in SQLite's busy handler, which sleeps in steps
    of up to 100 ms; queued here they are woken the moment the previous writer commits.
    Other processes still meet at the database's own lock (the busy timeout). PostgreSQL
    locks rows, so writers there are not queued.
    """
    if engine.dialect.name != "sqlite":
        yield
        return
    loop = asyncio.get_running_loop()
    entry = _write_locks.get(engine.sync_engine)
    if entry is None or entry[0] is not loop:
        entry = (loop, asyncio.Lock())
        _write_locks[engine.sync_engine] = entry
    async with entry[1]:
        yield


@dataclass(eq=False)
class _Job:
    """One caller's write transaction body, queued for the SQLite writer thread."""

    work: Callable[[Connection], Any]
    future: asyncio.Future[Any]
    ok: bool = False
    value: Any = None
    """What `work` returned (`ok`) or the exception it, or the commit, raised."""

    def settle(self) -> None:
        """Hand the outcome to the caller (on the event loop, after the COMMIT)."""
        if self.future.done():
            return
        if self.ok:
            self.future.set_result(self.value)
        else:
            self.future.set_exception(self.value)


class _FastWriter(ThreadOwned):
    """A sync SQLite engine over an async engine's file, driven from one thread.

    The async SQLite driver crosses to its thread three or four times per statement; this
    writer runs whole transactions in one hop to its own thread. One thread per database is
    enough: SQLite has one writer at a time, and the thread owns its connection (pysqlite's
    same-thread check).

    Group commit: the write jobs that queue up while the thread is busy run next in ONE
    transaction, each inside its own SAVEPOINT, then one COMMIT. A job that raises rolls
    back to its savepoint only (its caller gets the error); the others are committed
    together, and no caller hears of its write before the COMMIT succeeded. A batch costs
    one BEGIN, one COMMIT and one hop each way, however many jobs it holds.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine, "frontdesk-sqlite")
        self.async_engine = weakref.ref(engine)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending: list[_Job] = []
        self.drainer: asyncio.Task[None] | None = None

    def submit(self, work: Callable[[Connection], Any]) -> _Job:
        """Queue `work`; the batch it joins runs once the thread is free."""
        loop = asyncio.get_running_loop()
        if loop is not self.loop:  # A new event loop (each test has its own): start afresh.
            self.loop, self.pending, self.drainer = loop, [], None
        job = _Job(work, loop.create_future())
        self.pending.append(job)
        if self.drainer is None:
            self.drainer = loop.create_task(self._drain())
        return job

    def withdraw(self, job: _Job) -> bool:
        """Take `job` off the queue if no transaction has picked it up yet."""
        if job in self.pending:
            self.pending.remove(job)
            return True
        return False

    async def _drain(self) -> None:
        """Run the queued jobs batch by batch until the queue is empty."""
        loop = asyncio.get_running_loop()
        jobs: list[_Job] = []
        try:
            while self.pending:
                engine = self.async_engine()
                if engine is None:
                    break
                # Queued behind the async engine's writers of this process (`write_slot`).
                async with write_slot(engine):
                    jobs, self.pending = self.pending, []
                    done = loop.run_in_executor(self.executor, self.run_batch, jobs)
                    try:
                        await asyncio.shield(done)
                    except asyncio.CancelledError:
                        # The loop is closing: let the transaction end before letting go.
                        await asyncio.wait([done])
                        raise
                    except Exception as e:  # The connection itself failed (a ROLLBACK).
                        for job in jobs:
                            job.value, job.ok = e, False
                for job in jobs:
                    job.settle()
                jobs = []
        finally:
            self.drainer = None
            for job in [*jobs, *self.pending]:
                job.future.cancel()

    def run_batch(self, jobs: list[_Job]) -> None:
        """On the writer thread: run `jobs`, a savepoint each, in as few transactions as
        SQLite allows (a failure that ends the whole transaction starts a new one)."""
        while jobs:
            jobs = self._transaction(jobs)

    def _transaction(self, jobs: list[_Job]) -> list[_Job]:
        """Run `jobs` in one transaction; returns those left to run when SQLite ended the
        transaction on its own (after an I/O or busy error), which then all fail."""
        conn = self.connection()
        raw = conn.connection.driver_connection
        assert raw is not None, "a checked-out pysqlite connection"
        try:
            with conn.begin():
                for index, job in enumerate(jobs):
                    raw.execute("SAVEPOINT frontdesk_job")
                    try:
                        job.value, job.ok = job.work(conn), True
                    except Exception as e:
                        job.value, job.ok = e, False
                        if not raw.in_transaction:
                            # SQLite rolled the whole transaction back: nothing of this
                            # batch is written; the jobs not run yet get a fresh one.
                            for done in jobs[:index]:
                                done.value, done.ok = e, False
                            self.drop_connection()
                            return jobs[index + 1 :]
                        raw.execute("ROLLBACK TO frontdesk_job")
                    raw.execute("RELEASE frontdesk_job")
        except Exception as e:  # BEGIN or COMMIT failed: nothing of the batch is written.
            if raw.in_transaction:  # A failed COMMIT leaves SQLite's transaction open.
                raw.rollback()
            for job in jobs:
                if job.ok or job.value is None:  # Keep a job's own error.
                    job.value, job.ok = e, False
            self.drop_connection()
        return []


class LoopOwned(KeptConnection):
    """A kept connection used on the event loop's own thread (the fast paths), by one loop
    at a time (`lock`: another loop's caller goes to the thread instead). Not bound to one
    thread by pysqlite: a test's event loop may run on another thread than the last one's."""

    def __init__(self, engine: AsyncEngine, **options: Any) -> None:
        super().__init__(sync_twin(engine, connect_args={"check_same_thread": False}, **options))
        self.lock = threading.Lock()
        self.closed = False

    def close(self) -> None:
        """Close the kept connection and the engine's pool."""
        with self.lock:
            self.closed = True
            self.drop_connection()
            self.engine.dispose()


class _Inline(LoopOwned):
    """The writer's fast path: a write transaction run at once on the caller's thread (the
    event loop's), on a connection of its own that never waits for SQLite's write lock.

    Only `run` decides when (the process idle, see the module's docstring); this runs one
    write as the writer runs a batch of one: `BEGIN IMMEDIATE`, `work`, `COMMIT`, or a
    rollback when `work` raises (its caller gets the error). The connection's busy timeout
    is 0: when another connection holds the write lock, `BEGIN IMMEDIATE` fails at once and
    the write goes to the writer thread, which waits for the lock there, off the loop.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine)
        event.listen(self.engine, "connect", _no_busy_wait)

    def run(self, work: Callable[[Connection], T]) -> tuple[bool, T | None]:
        """`(True, what work returned)`, or `(False, None)` when the write lock was taken
        (nothing ran). `work`'s own error, or the database's, is raised."""
        if not self.lock.acquire(blocking=False):
            return False, None
        try:
            conn = self.connection()
            try:
                tx = conn.begin()
            except DBAPIError as e:
                if _is_busy(e):
                    return False, None
                self.drop_connection()
                raise
            try:
                with tx:  # COMMIT on return, ROLLBACK when `work` raises.
                    value = work(conn)
            except DBAPIError:  # From `work` or the COMMIT: nothing of `work` is written.
                self.drop_connection()
                raise
            return True, value
        finally:
            self.lock.release()


def _no_busy_wait(dbapi_connection: Any, _record: Any) -> None:
    """After `install_hooks`' busy timeout: the fast path never waits for the write lock."""
    dbapi_connection.execute("PRAGMA busy_timeout=0")


def _is_busy(error: DBAPIError) -> bool:
    """Whether SQLite refused because another connection holds the write lock."""
    code = getattr(error.orig, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_BUSY


def loop_idle() -> bool:
    """Whether nothing else is ready to run on the running event loop (an event loop
    without asyncio's ready queue, uvloop's, says no): then a transaction may run at once
    on its thread, delaying no one, instead of paying two thread wake-ups."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    return ready is not None and not ready


def _idle(writer: _FastWriter, engine: AsyncEngine) -> bool:
    """Whether a write may take the fast path: the loop idle (`loop_idle`), no write of
    this process queued or running, the async engine's write slot free."""
    if writer.pending or writer.drainer is not None:  # Under load: the cheapest check first.
        return False
    if not loop_idle():
        return False
    slot = _write_locks.get(engine.sync_engine)
    return slot is None or not slot[1].locked()


_writers: weakref.WeakKeyDictionary[Engine, _FastWriter] = weakref.WeakKeyDictionary()
_inlines: weakref.WeakKeyDictionary[Engine, _Inline] = weakref.WeakKeyDictionary()


def _inline(engine: AsyncEngine) -> _Inline:
    return one_per_engine(_inlines, engine, lambda: _Inline(engine))


def _writer(engine: AsyncEngine) -> _FastWriter:
    return one_per_engine(_writers, engine, lambda: _FastWriter(engine))


async def run(engine: AsyncEngine, work: Callable[[Connection], T]) -> T:
    """Run `work` in a write transaction of `engine` (SQLite) on its writer thread.

    A caller cancelled before its write started withdraws it; once handed to the thread,
    it runs to its end, and the cancellation is delivered after. When the process is idle
    the write runs at once on this thread instead (`_Inline`).
    """
    writer = _writer(engine)
    if _idle(writer, engine):
        ran, value = _inline(engine).run(work)
        if ran:
            return value  # type: ignore[return-value]
    job = writer.submit(work)
    try:
        result: T = await asyncio.shield(job.future)
    except asyncio.CancelledError:
        if not writer.withdraw(job):
            # Keep the caller until the transaction is over, so its outcome is known.
            await asyncio.wait([job.future])
        raise
    return result


def owns(conn: Connection, engine: AsyncEngine) -> bool:
    """Whether `conn` is a connection of `engine`'s writer (its thread's or its fast path's)."""
    writers = (_writers.get(engine.sync_engine), _inlines.get(engine.sync_engine))
    return any(w is not None and conn.engine.pool is w.engine.pool for w in writers)


async def dispose(engine: AsyncEngine) -> None:
    """Let `engine`'s queued writes end, then close its writer's connections and thread."""
    inline = _inlines.pop(engine.sync_engine, None)
    if inline is not None:
        inline.close()
    writer = _writers.pop(engine.sync_engine, None)
    if writer is None:
        return
    running = asyncio.get_running_loop()
    if writer.drainer is not None and writer.loop is running:
        await asyncio.wait([writer.drainer])  # The queued writes end first.
    await writer.aclose()
