"""Database URLs and engines shared by the conversation store and the audit log.

Both packages open the same kind of database, so the URL rules (plain forms map to the async
drivers) and the SQLite settings that make several writers safe live here, once.
"""

from __future__ import annotations

import asyncio
import sqlite3
import weakref
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy
from sqlalchemy import Connection, Engine, event
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, StatementError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.sql.expression import Executable

from frontdesk.errors import ConfigError
from frontdesk.masking import scrub

__all__ = [
    "ACCEPTED_URLS",
    "DEFAULT_URL",
    "SQLITE_BUSY_TIMEOUT_MS",
    "create_engine",
    "dispose_engine",
    "SqliteStatement",
    "normalise_url",
    "run_write",
    "sqlite_driver",
    "write_slot",
    "writes_to",
]

T = TypeVar("T")

DEFAULT_URL = "sqlite:///frontdesk.db"
"""The embedded default: a SQLite file in the working folder."""

ACCEPTED_URLS = (
    "sqlite:///PATH, sqlite+aiosqlite:///PATH, postgresql://USER@HOST/DB "
    "or postgresql+asyncpg://USER@HOST/DB"
)

SQLITE_BUSY_TIMEOUT_MS = 30_000
"""How long a SQLite writer waits for another writer before the driver gives up."""

_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}


def normalise_url(url: str) -> str:
    """Map a store URL to its async-driver form.

    Raises:
        ConfigError: for any other scheme, an in-memory SQLite database (each connection
            would see its own empty database), or a URL that does not parse.
    """
    try:
        parsed: URL = make_url(url)
    except (ArgumentError, ValueError, TypeError):
        raise ConfigError(
            f"cannot parse database URL {scrub(url)!r}; use {ACCEPTED_URLS}"
        ) from None
    driver = _DRIVERS.get(parsed.drivername)
    if driver is None:
        raise ConfigError(
            f"unsupported database URL scheme {parsed.drivername!r}; use {ACCEPTED_URLS}"
        )
    if driver.startswith("sqlite") and parsed.database in (None, "", ":memory:"):
        raise ConfigError(
            "an in-memory SQLite database cannot be shared between connections; "
            "use a file, e.g. sqlite:///frontdesk.db"
        )
    return parsed.set(drivername=driver).render_as_string(hide_password=False)


def create_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An async engine for `url` (any accepted form).

    On SQLite every connection runs in WAL mode with a busy timeout, and every transaction
    starts with `BEGIN IMMEDIATE`: SQLite silently ignores `SELECT ... FOR UPDATE`, so taking
    the write lock up front is what serialises read-then-write transactions and keeps
    "database is locked" (SQLITE_BUSY_SNAPSHOT) from reaching the caller.
    """
    normalised = normalise_url(url)
    if normalised.startswith("sqlite"):
        # Every transaction ends in an explicit COMMIT or ROLLBACK, so the pool's extra
        # rollback on check-in would only cost one more round trip to the driver thread.
        kwargs.setdefault("pool_reset_on_return", None)
        engine = create_async_engine(normalised, **{"hide_parameters": True, **kwargs})
        _install_sqlite_hooks(engine.sync_engine)
        return engine
    kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine(normalised, **{"hide_parameters": True, **kwargs})


def _install_sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Hand transaction control to the "begin" hook below instead of the driver.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        if connection.get_execution_options().get("frontdesk_readonly"):
            # A read-only transaction: a WAL snapshot, never blocked by writers.
            connection.exec_driver_sql("BEGIN")
        else:
            connection.exec_driver_sql("BEGIN IMMEDIATE")


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


class _FastWriter:
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
        url = engine.url.set(drivername="sqlite")
        self.engine = sqlalchemy.create_engine(url, pool_reset_on_return=None, hide_parameters=True)
        _install_sqlite_hooks(self.engine)
        options = engine.get_execution_options()
        if options:
            self.engine = self.engine.execution_options(**options)
        self.async_engine = weakref.ref(engine)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="frontdesk-sqlite")
        self.closed = False
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
        with self.engine.connect() as conn:
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
                                return jobs[index + 1 :]
                            raw.execute("ROLLBACK TO frontdesk_job")
                        raw.execute("RELEASE frontdesk_job")
            except Exception as e:  # BEGIN or COMMIT failed: nothing of the batch is written.
                if raw.in_transaction:  # A failed COMMIT leaves SQLite's transaction open.
                    raw.rollback()
                for job in jobs:
                    if job.ok or job.value is None:  # Keep a job's own error.
                        job.value, job.ok = e, False
        return []

    def close(self) -> None:
        """Close the pooled connection on its own thread, then let the thread end."""
        if not self.closed:
            self.closed = True
            self.executor.submit(self.engine.dispose)
            self.executor.shutdown(wait=False)


_writers: weakref.WeakKeyDictionary[Engine, _FastWriter] = weakref.WeakKeyDictionary()


def _writer(engine: AsyncEngine) -> _FastWriter:
    writer = _writers.get(engine.sync_engine)
    if writer is None or writer.closed:
        writer = _FastWriter(engine)
        _writers[engine.sync_engine] = writer
        # An engine dropped without `dispose_engine` still frees the thread and connection.
        weakref.finalize(engine.sync_engine, writer.close)
    return writer


async def run_write(engine: AsyncEngine, work: Callable[[Connection], T]) -> T:
    """Run `work` (sync SQL on a sync `Connection`) in one write transaction of `engine`.

    The SQL is written once, sync, for both databases. On SQLite it runs on a sync engine
    over the same file, on a thread of its own, grouped with the other writes queued
    meanwhile into one transaction (a savepoint each, see `_FastWriter`); on PostgreSQL
    it runs in the async engine's transaction (`AsyncConnection.run_sync`). The write is
    committed when `work` returns (and the caller resumes only after the COMMIT), and
    rolled back when it raises.

    A caller cancelled before its write started withdraws it; once handed to the SQLite
    thread, it runs to its end, and the cancellation is delivered after.
    """
    if engine.dialect.name != "sqlite":
        async with engine.begin() as conn:
            return await conn.run_sync(work)
    writer = _writer(engine)
    job = writer.submit(work)
    try:
        result: T = await asyncio.shield(job.future)
    except asyncio.CancelledError:
        if not writer.withdraw(job):
            # Keep the caller until the transaction is over, so its outcome is known.
            await asyncio.wait([job.future])
        raise
    return result


_PYSQLITE = SQLiteDialect_pysqlite()


def sqlite_driver(conn: Connection) -> sqlite3.Connection | None:
    """The pysqlite connection under `conn` (a SQLite writer's), or `None` on other drivers.

    On it, `SqliteStatement` runs a turn's prebuilt statements without SQLAlchemy's
    execution layer; elsewhere (PostgreSQL, the async drivers) they go through `conn`.
    """
    if conn.dialect.driver != "pysqlite":
        return None
    raw = conn.connection.driver_connection
    return raw if isinstance(raw, sqlite3.Connection) else None


class SqliteStatement:
    """A prebuilt statement compiled once for pysqlite and run straight on the driver.

    For a turn's small statements SQLAlchemy's execution layer (execution context, events,
    result wrapping) costs more than SQLite's own work, and on SQLite every write runs on
    one thread, so that cost caps the throughput. The SQL, the parameter order, the
    defaults and the bind processing (timestamps, JSON) are SQLAlchemy's own, taken from
    the compiled statement; driver errors are raised as SQLAlchemy's typed errors
    (`IntegrityError`, `OperationalError`), as `Connection.execute` would.
    """

    def __init__(self, statement: Executable, column_keys: Sequence[str] | None = None) -> None:
        """Compile `statement` (with these insert/update columns, if given)."""
        keys = None if column_keys is None else list(column_keys)
        compiled = statement.compile(dialect=_PYSQLITE, column_keys=keys)  # type: ignore[attr-defined]
        self.sql: str = str(compiled)
        names = compiled.positiontup or ()
        self._slots = [
            (
                name,
                None if bind.required else bind.effective_value,
                bind.type.dialect_impl(_PYSQLITE).bind_processor(_PYSQLITE),
            )
            for name, bind in ((name, compiled.binds[name]) for name in names)
        ]
        # For a SELECT: each result column's key and SQLAlchemy's own decoding for it
        # (timestamps, JSON), so rows read on the driver equal rows read through SQLAlchemy.
        self._columns = [
            (column.keyname, column.type.dialect_impl(_PYSQLITE).result_processor(_PYSQLITE, None))
            for column in compiled._result_columns
        ]

    def _bind(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        values = []
        for name, default, process in self._slots:
            value = params.get(name, default)
            values.append(value if process is None else process(value))
        return tuple(values)

    def execute(self, raw: sqlite3.Connection, params: Mapping[str, Any]) -> sqlite3.Cursor:
        """Run the statement once with named `params`; the cursor holds any RETURNING rows."""
        try:
            return raw.execute(self.sql, self._bind(params))
        except sqlite3.Error as e:
            raise self._error(e) from e

    def mappings(self, raw: sqlite3.Connection, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Run a SELECT and return its rows as dicts keyed like SQLAlchemy's `.mappings()`."""
        rows = self.execute(raw, params).fetchall()
        columns = self._columns
        return [
            {
                key: value if process is None else process(value)
                for (key, process), value in zip(columns, row, strict=True)
            }
            for row in rows
        ]

    def executemany(self, raw: sqlite3.Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run the statement once per row of named parameters."""
        try:
            raw.executemany(self.sql, [self._bind(row) for row in rows])
        except sqlite3.Error as e:
            raise self._error(e) from e

    def _error(self, error: sqlite3.Error) -> StatementError:
        return DBAPIError.instance(self.sql, None, error, sqlite3.Error, hide_parameters=True)


def writes_to(conn: Connection, engine: AsyncEngine) -> bool:
    """Whether `conn` is a connection of `engine` (directly, or its SQLite fast writer)."""
    if conn.engine is engine.sync_engine:
        return True
    writer = _writers.get(engine.sync_engine)
    return writer is not None and conn.engine.pool is writer.engine.pool


async def dispose_engine(engine: AsyncEngine) -> None:
    """Close every pooled connection of `engine`, its SQLite fast writer's included."""
    writer = _writers.pop(engine.sync_engine, None)
    running = asyncio.get_running_loop()
    if writer is not None and writer.drainer is not None and writer.loop is running:
        await asyncio.wait([writer.drainer])  # The queued writes end first.
    if writer is not None and not writer.closed:
        writer.closed = True
        await asyncio.get_running_loop().run_in_executor(writer.executor, writer.engine.dispose)
        writer.executor.shutdown(wait=False)
    await engine.dispose()
