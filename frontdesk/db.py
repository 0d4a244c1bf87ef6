"""Database URLs and engines shared by the conversation store and the audit log.

Both packages open the same kind of database, so the URL rules (plain forms map to the async
drivers) and the SQLite settings that make several writers safe live here, once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from frontdesk._driver import jsontext, postgres, probe, reader, writer
from frontdesk._driver.writer import SQLITE_BUSY_TIMEOUT_MS, install_hooks, write_slot
from frontdesk.errors import ConfigError
from frontdesk.masking import scrub

__all__ = [
    "ACCEPTED_URLS",
    "DEFAULT_URL",
    "SQLITE_BUSY_TIMEOUT_MS",
    "AsyncEngine",
    "Connection",
    "UTCDateTime",
    "create_engine",
    "dispose_engine",
    "normalise_url",
    "one_call_turns",
    "read_transaction",
    "reads_beside_writes",
    "run_alone",
    "run_read",
    "run_write",
    "utcnow",
    "write_slot",
    "writes_to",
]

T = TypeVar("T")

# `Connection` (sync, what `run_write`'s work gets) and `AsyncEngine` are re-exported so that
# code above the store (the orchestrator) names them without importing SQLAlchemy itself.

DEFAULT_URL = "sqlite:///frontdesk.db"
"""The embedded default: a SQLite file in the working folder."""

ACCEPTED_URLS = (
    "sqlite:///PATH, sqlite+aiosqlite:///PATH, postgresql://USER@HOST/DB "
    "or postgresql+asyncpg://USER@HOST/DB"
)

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

    On PostgreSQL a pooled connection the server closed (a restart, a terminated backend)
    is dropped at checkout by a check that costs no round trip (`_driver.postgres`),
    not by SQLAlchemy's pre-ping: on asyncpg that ping is three round trips (BEGIN, `;`,
    ROLLBACK) per checkout, 9 of a turn's 37. A connection lost during a transaction fails
    it as invalidated, and the store's transactions run again from the start
    (`frontdesk._driver.tx.is_transient`).
    """
    normalised = normalise_url(url)
    # JSON columns written as `json.dumps` writes them, with its encoder made once.
    kwargs.setdefault("json_serializer", jsontext.dumps)
    if normalised.startswith("sqlite"):
        probe.can_open_sqlite(make_url(normalised).database or "")
        # Every transaction ends in an explicit COMMIT or ROLLBACK, so the pool's extra
        # rollback on check-in would only cost one more round trip to the driver thread.
        kwargs.setdefault("pool_reset_on_return", None)
        engine = create_async_engine(normalised, **{"hide_parameters": True, **kwargs})
        install_hooks(engine.sync_engine)
        return engine
    engine = create_async_engine(normalised, **{"hide_parameters": True, **kwargs})
    postgres.install_hooks(engine.sync_engine)
    return engine


async def run_write(engine: AsyncEngine, work: Callable[[Connection], T]) -> T:
    """Run `work` (sync SQL on a sync `Connection`) in one write transaction of `engine`.

    The SQL is written once, sync, for both databases. On SQLite it runs on a sync engine
    over the same file, on a thread of its own, grouped with the other writes queued
    meanwhile into one transaction (a savepoint each, see `frontdesk._driver`); on PostgreSQL
    on a connection of the async engine's pool, in one hop (`_driver.postgres.run`). The
    write is committed when `work` returns (and the caller resumes only after the COMMIT), and
    rolled back when it raises.

    A caller cancelled before its write started withdraws it; once handed to the SQLite
    thread, it runs to its end, and the cancellation is delivered after.
    """
    if engine.dialect.name != "sqlite":
        return await postgres.run(engine, work)
    return await writer.run(engine, work)


async def run_alone(engine: AsyncEngine, work: Callable[[Connection], T]) -> T:
    """Run `work`, sync SQL of ONE statement, as a transaction of its own.

    On PostgreSQL the connection is in autocommit: the server commits the statement by
    itself, so neither a `BEGIN` nor a `COMMIT` costs a round trip (a turn's outcome,
    fenced in one statement: 4 round trips -> 1). A second statement in `work` would run
    outside the first one's transaction: use `run_write` for that. On SQLite it is
    `run_write` (the writer's transactions are grouped, no round trips to save).
    """
    if engine.dialect.name == "sqlite":
        return await writer.run(engine, work)
    # No BEGIN in autocommit; the transaction is SQLAlchemy's, for `Statement`'s fast path.
    return await postgres.run(engine, work, options=_AUTOCOMMIT)


async def run_read(engine: AsyncEngine, work: Callable[[Connection], T]) -> T:
    """Run `work` (sync SQL on a sync `Connection`) in one read-only transaction of `engine`.

    On SQLite it runs on a thread and connection of its own, in one hop (a WAL snapshot,
    never queued behind the writer); on PostgreSQL in a transaction on a connection of the
    async engine's pool, in one hop (`_driver.postgres.run`). Either runs beside a write of
    the same process.
    """
    if engine.dialect.name != "sqlite":
        return await postgres.run(engine, work, options=_READONLY)
    return await reader.run(engine, work)


_AUTOCOMMIT = {"isolation_level": "AUTOCOMMIT"}
_READONLY = {"frontdesk_readonly": True}


@asynccontextmanager
async def read_transaction(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A read-only transaction of the async engine (on SQLite a snapshot, `BEGIN`, never
    queued behind writers): what `run_read` and the store's async reads run in."""
    async with engine.connect() as conn:
        await conn.execution_options(frontdesk_readonly=True)
        async with conn.begin():
            yield conn


def reads_beside_writes(engine: AsyncEngine) -> bool:
    """Whether a read that a write transaction could carry (a turn's memory lookup in its
    first transaction) runs better beside it, as a read of its own (`run_read`).

    PostgreSQL: yes, the server ranks on a second connection while the first one writes
    (docs/benchmarks.md). SQLite: no,
    the reader and the writer threads contend for one interpreter lock, and inside the
    writer's transaction the read costs no hop of its own (concurrent memory turns lost
    about 8 % beside it; alone they were level)."""
    return engine.dialect.name != "sqlite"


def one_call_turns(engine: AsyncEngine) -> bool:
    """Whether a warm turn's start runs as one call of the database's own function
    (`threads/_server_turn.py`, revision 0031) rather than as a transaction of statements.

    PostgreSQL: yes, every statement is a round trip there, mostly the client's CPU (a
    start went from twelve round trips to one, docs/benchmarks.md). SQLite: no, it has no
    functions, and a statement there is a call into the library, no round trip."""
    return engine.dialect.name == "postgresql"


def writes_to(conn: Connection, engine: AsyncEngine) -> bool:
    """Whether `conn` is a connection of `engine` (directly, or its SQLite fast writer)."""
    return conn.engine is engine.sync_engine or writer.owns(conn, engine)


async def dispose_engine(engine: AsyncEngine) -> None:
    """Close every pooled connection of `engine`, its SQLite writer's and reader's included."""
    await writer.dispose(engine)
    await reader.dispose(engine)
    await engine.dispose()


# -- timestamps as every table stores them (`threads`, `jobs`) ------------------------------


def utcnow() -> datetime:
    """Now, tz-aware UTC."""
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timestamp that is always tz-aware UTC in Python, on SQLite (no time zones) as well."""

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: pass a tz-aware UTC time")
        value = value.astimezone(UTC)
        # SQLite stores text; a naive UTC time sorts correctly as text.
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def bind_processor(self, dialect: Dialect) -> Callable[[datetime | None], Any] | None:
        """SQLAlchemy's processor (`process_bind_param`, then the dialect's own); on SQLite a
        `datetime` in `UTC` (what `utcnow` gives) is written straight by `isoformat`: the
        same text, without the conversion to itself, the naive copy and the storage
        format's dict of fields (a turn writes a few; checked once against the slow path)."""
        slow = super().bind_processor(dialect)
        if slow is None or dialect.name != "sqlite" or slow(_PROBE) != _sqlite_text(_PROBE):
            return slow

        def process(value: datetime | None) -> Any:
            if type(value) is datetime and value.tzinfo is UTC:
                return _sqlite_text(value)
            return slow(value)

        return process

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


_PROBE = datetime(1, 2, 3, 4, 5, 6, 7, tzinfo=UTC)
"""A UTC time whose every field is padded in SQLite's text (`UTCDateTime.bind_processor`)."""


def _sqlite_text(value: datetime) -> str:
    """A `datetime` in `UTC` as SQLAlchemy stores it on SQLite: `YYYY-MM-DD HH:MM:SS.ffffff`,
    naive (`isoformat`'s `+00:00` cut)."""
    return value.isoformat(" ", "microseconds")[:-6]
