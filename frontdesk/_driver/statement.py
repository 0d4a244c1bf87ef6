"""`Statement`: a prebuilt statement that its callers run the same way on every database.

It runs straight on the driver's DBAPI connection where that pays: on the SQLite writer's
and reader's pysqlite connections, and on PostgreSQL's asyncpg connections inside a
transaction. For a turn's small statements SQLAlchemy's execution layer (execution context,
events, result wrapping) costs more than the database's own work: on SQLite every write
runs on one thread, so that cost caps the throughput; on PostgreSQL it was half of a
statement's CPU (docs/benchmarks.md). Anywhere else (the async SQLite driver's reads, a
connection outside a transaction) it goes through `Connection.execute`, and so does a
PostgreSQL statement while something listens to SQLAlchemy's cursor events (a tracer, a
statement counter): it sees every statement. The SQL, the parameter order, the literal
values and the bind and result processing (UTC timestamps, JSON) are SQLAlchemy's own,
taken from the statement compiled for the connection's dialect, and driver errors are raised
as SQLAlchemy's typed errors (`IntegrityError`, `OperationalError`; a lost PostgreSQL
connection invalidated, as SQLAlchemy does), so retries and checks see the same thing on
every path.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, DateTime, TypeDecorator
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.sql.expression import Executable

from frontdesk._driver.jsontext import dumps

__all__ = ["Statement", "driver_connection", "savepoint"]

_PYSQLITE = SQLiteDialect_pysqlite(json_serializer=dumps)


def _as_it_is(value: bytes | None) -> bytes | None:
    """A value bound as it is (see `_ADAPTED`)."""
    return value


_ADAPTED = (type(None), bytes)
"""pysqlite looks for an adapter for every parameter that is not exactly an int, float, str
or bytearray; for `None` and `bytes` (most of a message's, an outcome's and an audit row's
columns) it finds none only after raising and clearing an `AttributeError` with a formatted
message, which costs a turn more than 1 % of its instructions. An adapter that gives the
value back binds exactly what was bound without one, found at the first lookup. One the
application registered before is kept."""


def adapt_as_they_are() -> None:
    """Register `_as_it_is` for the `_ADAPTED` types that have no adapter yet (at import)."""
    for kind in _ADAPTED:
        sqlite3.adapters.setdefault((kind, sqlite3.PrepareProtocol), _as_it_is)


adapt_as_they_are()

TIMESTAMPS_REMEMBERED = 4096
"""Per timestamp column of a statement: how many decoded values are kept by their text."""


def _result_processor(kind: Any, dialect: Dialect, driver_type: Any) -> Callable[[Any], Any] | None:
    """SQLAlchemy's decoding of a result column of type `kind` on `dialect` (the driver
    reports the column as `driver_type`); a timestamp parsed from text is remembered by its
    text (a turn reads its thread's timestamps again every turn, and parsing one costs 30
    times the lookup; a `datetime` is immutable, so it can be shared)."""
    process = kind.dialect_impl(dialect).result_processor(dialect, driver_type)
    impl = kind.impl_instance if isinstance(kind, TypeDecorator) else kind
    if process is None or not isinstance(impl, DateTime) or dialect.driver != "pysqlite":
        return process  # type: ignore[no-any-return]
    return functools.lru_cache(maxsize=TIMESTAMPS_REMEMBERED)(process)


def driver_connection(conn: Connection) -> sqlite3.Connection | None:
    """The pysqlite connection under `conn` (the SQLite writer's), or `None` elsewhere.

    It is the pool's `dbapi_connection`, a plain attribute: pysqlite's driver connection
    is the DBAPI connection itself, and `driver_connection` reaches it through two
    properties and a dialect call, for each statement (`None` alike once invalidated)."""
    if conn.dialect.driver != "pysqlite":
        return None
    raw = conn.connection.dbapi_connection
    return raw if isinstance(raw, sqlite3.Connection) else None


def _dbapi_connection(conn: Connection) -> Any | None:
    """The DBAPI connection a statement runs straight on, or `None`: then through
    `Connection.execute` (see the module's docstring for where and why)."""
    driver = conn.dialect.driver
    if driver == "pysqlite":
        return driver_connection(conn)
    if driver != "asyncpg" or not conn.in_transaction():
        return None  # Outside a transaction SQLAlchemy's autobegin must see the statement.
    dispatch = conn.dispatch
    if dispatch.before_cursor_execute or dispatch.after_cursor_execute:
        return None
    return conn.connection.dbapi_connection


@contextlib.contextmanager
def savepoint(conn: Connection) -> Iterator[None]:
    """A savepoint around a step that may fail alone (a turn's lookups in its first
    transaction): rolled back to if the block raises, which then propagates.

    Where statements run straight on the driver (`_dbapi_connection`) it is the driver's own
    `SAVEPOINT` (as the SQLite writer's per-job ones are): SQLAlchemy's `begin_nested`
    costs more than the lookup it guards. Elsewhere it is `begin_nested`. On a connection
    in autocommit (`frontdesk.db.run_alone`) each statement is a transaction of its own: a
    failed one leaves nothing to roll back to, so there is no savepoint (nor its round trips).
    """
    if conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        yield
        return
    dbapi = _dbapi_connection(conn)
    if dbapi is None:
        with conn.begin_nested():
            yield
    elif isinstance(dbapi, sqlite3.Connection):
        with _sqlite_savepoint(dbapi):
            yield
    else:
        _on_driver(conn, dbapi, "SAVEPOINT frontdesk_step", ())
        try:
            yield
        except BaseException:
            if not conn.invalidated:  # A lost connection has no transaction to go back in.
                _on_driver(conn, dbapi, "ROLLBACK TO SAVEPOINT frontdesk_step", ())
            raise
        _on_driver(conn, dbapi, "RELEASE SAVEPOINT frontdesk_step", ())


@contextlib.contextmanager
def _sqlite_savepoint(raw: sqlite3.Connection) -> Iterator[None]:
    raw.execute("SAVEPOINT frontdesk_step")
    try:
        yield
    except BaseException:
        if raw.in_transaction:  # Unless SQLite ended the whole transaction itself.
            raw.execute("ROLLBACK TO frontdesk_step")
            raw.execute("RELEASE frontdesk_step")
        raise
    raw.execute("RELEASE frontdesk_step")


def _on_driver(conn: Connection, dbapi: Any, sql: str, args: Any, *, many: bool = False) -> Any:
    """Run `sql` on `conn`'s DBAPI connection `dbapi` (`many`: once per row of `args`); the
    cursor, or the driver's error as SQLAlchemy raises it (`_error`)."""
    cursor = dbapi.cursor()
    try:
        if many:
            cursor.executemany(sql, args)
        else:
            cursor.execute(sql, args)
    except conn.dialect.loaded_dbapi.Error as e:
        raise _error(conn, dbapi, cursor, sql, e) from e
    except BaseException as e:
        _drop_if_cancelled(conn, e)
        raise
    return cursor


def _drop_if_cancelled(conn: Connection, error: BaseException) -> None:
    """A PostgreSQL connection whose statement was cut off (the caller cancelled, or a
    timeout) is invalidated, as SQLAlchemy's own execute does: the driver may have left
    the server inside a transaction it no longer tracks (a `BEGIN` cut off keeps asyncpg's
    transaction open), and the next caller's writes would go to a savepoint in it, never
    committed."""
    cut_off = not isinstance(error, Exception) or isinstance(error, TimeoutError)
    if cut_off and conn.dialect.driver == "asyncpg" and not conn.closed:
        conn.invalidate(error)


def _error(conn: Connection, dbapi: Any, cursor: Any, sql: str, error: Exception) -> StatementError:
    """The driver's `error` as SQLAlchemy raises it; a PostgreSQL connection it found lost is
    invalidated, as SQLAlchemy does, so the transaction runs again on a new one (the SQLite
    writer keeps or replaces its own connection)."""
    dialect = conn.dialect
    lost = dialect.driver == "asyncpg" and dialect.is_disconnect(error, dbapi, cursor)  # type: ignore[arg-type]
    if lost:
        conn.invalidate(error)
    return DBAPIError.instance(
        sql,
        None,
        error,
        dialect.loaded_dbapi.Error,
        hide_parameters=True,
        connection_invalidated=lost,
        dialect=dialect,
    )


class _Plan:
    """A statement compiled for one dialect: the SQL its driver runs, the bind values in
    the driver's order (literal defaults filled in, bind processing applied) and the
    decoding of its result rows."""

    def __init__(self, statement: Executable, dialect: Dialect, keys: list[str] | None) -> None:
        compiled = statement.compile(dialect=dialect, column_keys=keys)  # type: ignore[attr-defined]
        self.dialect = dialect
        self.sql: str = str(compiled)
        self._slots = [
            (
                name,
                None if bind.required else bind.effective_value,
                bind.type.dialect_impl(dialect).bind_processor(dialect),
            )
            for name, bind in ((name, compiled.binds[name]) for name in compiled.positiontup or ())
        ]
        self._kinds = [(column.keyname, column.type) for column in compiled._result_columns]
        self._keys = [key for key, _ in self._kinds]
        # Each typed result column's index, key and decoding, from the first result's
        # description (a driver's column type can choose the decoding: PostgreSQL's numerics).
        self._processed: list[tuple[int, str, Callable[[Any], Any]]] | None = None

    def bind(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        values = []
        for name, default, process in self._slots:
            value = params.get(name, default)
            values.append(value if process is None else process(value))
        return tuple(values)

    def decode(self, description: Sequence[Any], row: Sequence[Any]) -> dict[str, Any]:
        if not self._kinds:  # Textual SQL: no typed columns, the driver's names.
            return {column[0]: value for column, value in zip(description, row, strict=True)}
        processed = self._processed
        if processed is None:
            processed = self._processed = self._processors(description)
        decoded = dict(zip(self._keys, row, strict=True))
        for index, key, process in processed:  # Timestamps, JSON: the typed columns.
            decoded[key] = process(row[index])
        return decoded

    def _processors(
        self, description: Sequence[Any]
    ) -> list[tuple[int, str, Callable[[Any], Any]]]:
        last = {key: index for index, key in enumerate(self._keys)}  # A repeated key: the last.
        found = []
        for index, (key, kind) in enumerate(self._kinds):
            process = _result_processor(kind, self.dialect, description[index][1])
            if process is not None and last[key] == index:
                found.append((index, key, process))
        return found


class Statement:
    """One prebuilt statement (a PostgreSQL variant if its SQL differs there).

    Build it once, at import: building and cache-keying a statement costs more than
    running it on SQLite. It is compiled for SQLite at once and for PostgreSQL at its first
    run there, with that connection's dialect.
    """

    def __init__(
        self,
        statement: Executable,
        *,
        postgresql: Executable | None = None,
        columns: Sequence[str] | None = None,
        sqlite: bool = True,
    ) -> None:
        """`statement` for SQLite (and every database unless `postgresql` is given);
        `columns`: an INSERT's columns, in the order the driver binds them; `sqlite=False`:
        a statement only PostgreSQL runs (a write inside a CTE), never compiled for SQLite."""
        self.statement = statement
        self._postgresql = statement if postgresql is None else postgresql
        self._keys = None if columns is None else list(columns)
        self._plans: dict[type[Dialect], _Plan] = {}
        self.sql: str = ""
        """The SQL run on pysqlite (SQLAlchemy's own compilation for it)."""
        if sqlite:
            plan = self._plans[SQLiteDialect_pysqlite] = _Plan(statement, _PYSQLITE, self._keys)
            self.sql = plan.sql

    def for_dialect(self, name: str) -> Executable:
        """The SQLAlchemy statement run on a database of dialect `name`."""
        return self._postgresql if name == "postgresql" else self.statement

    def run(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Run it once with named `params`, for its effect; returns the rows it changed."""
        dbapi = _dbapi_connection(conn)
        if dbapi is None:
            return int(conn.execute(self.for_dialect(conn.dialect.name), params).rowcount)
        plan = self._plan(conn.dialect)
        return int(_on_driver(conn, dbapi, plan.sql, plan.bind(params)).rowcount)

    def run_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run it once per row of named parameters (`rows` not empty)."""
        dbapi = _dbapi_connection(conn)
        if dbapi is None:
            conn.execute(self.for_dialect(conn.dialect.name), list(rows))
            return
        plan = self._plan(conn.dialect)
        _on_driver(conn, dbapi, plan.sql, [plan.bind(row) for row in rows], many=True)

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Run it and return every result row, keyed like SQLAlchemy's `.mappings()`."""
        dbapi = _dbapi_connection(conn)
        if dbapi is None:
            result = conn.execute(self.for_dialect(conn.dialect.name), params)
            return [dict(row) for row in result.mappings()]
        plan = self._plan(conn.dialect)
        cursor = _on_driver(conn, dbapi, plan.sql, plan.bind(params))
        description = cursor.description
        return [plan.decode(description, row) for row in cursor.fetchall()]

    def first(self, conn: Connection, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """Run it and return its first result row (keyed as in `rows`), or `None`."""
        dbapi = _dbapi_connection(conn)
        if dbapi is None:
            found = conn.execute(self.for_dialect(conn.dialect.name), params).mappings().first()
            return None if found is None else dict(found)
        plan = self._plan(conn.dialect)
        cursor = _on_driver(conn, dbapi, plan.sql, plan.bind(params))
        row = cursor.fetchone()
        return None if row is None else plan.decode(cursor.description, row)

    def _plan(self, dialect: Dialect) -> _Plan:
        plan = self._plans.get(type(dialect))
        if plan is None:
            if dialect.name == "sqlite":  # Its plan is made at once, unless `sqlite=False`.
                raise TypeError("this statement runs on PostgreSQL only (SQLite has no CTE writes)")
            statement = self.for_dialect(dialect.name)
            plan = self._plans[type(dialect)] = _Plan(statement, dialect, self._keys)
        return plan
