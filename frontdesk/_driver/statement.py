"""`Statement`: a prebuilt statement that its callers run the same way on every database.

On the SQLite writer's and reader's pysqlite connections it runs straight on the driver:
for a turn's small statements SQLAlchemy's execution layer (execution context, events,
result wrapping) costs more than SQLite's own work, and every SQLite write runs on that one
thread, so that cost caps the throughput. Anywhere else (PostgreSQL, the async SQLite
driver's reads) it goes through `Connection.execute`. The SQL, the parameter order, the
literal values and the bind and result processing (UTC timestamps, JSON) are SQLAlchemy's
own, taken from the compiled statement, and driver errors are raised as SQLAlchemy's typed
errors (`IntegrityError`, `OperationalError`), so retries and checks see the same thing on
both paths.
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, DateTime, TypeDecorator
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.sql.expression import Executable

__all__ = ["Statement", "driver_connection", "savepoint"]

_PYSQLITE = SQLiteDialect_pysqlite()

TIMESTAMPS_REMEMBERED = 4096
"""Per timestamp column of a statement: how many decoded values are kept by their text."""


def _result_processor(kind: Any) -> Callable[[Any], Any] | None:
    """SQLAlchemy's decoding of a result column of type `kind` on pysqlite; a timestamp's
    is remembered by its text (a turn reads its thread's timestamps again every turn, and
    parsing one costs 30 times the lookup; a `datetime` is immutable, so it can be shared)."""
    process = kind.dialect_impl(_PYSQLITE).result_processor(_PYSQLITE, None)
    impl = kind.impl_instance if isinstance(kind, TypeDecorator) else kind
    if process is None or not isinstance(impl, DateTime):
        return process  # type: ignore[no-any-return]
    return functools.lru_cache(maxsize=TIMESTAMPS_REMEMBERED)(process)


def driver_connection(conn: Connection) -> sqlite3.Connection | None:
    """The pysqlite connection under `conn` (the SQLite writer's), or `None` elsewhere."""
    if conn.dialect.driver != "pysqlite":
        return None
    raw = conn.connection.driver_connection
    return raw if isinstance(raw, sqlite3.Connection) else None


@contextlib.contextmanager
def savepoint(conn: Connection) -> Iterator[None]:
    """A savepoint around a step that may fail alone (a turn's lookups in its first
    transaction): rolled back to if the block raises, which then propagates.

    On the SQLite writer's connection it is the driver's own `SAVEPOINT` (as the writer's
    per-job ones are): SQLAlchemy's `begin_nested` costs more than the lookup it guards.
    Elsewhere it is `begin_nested`.
    """
    raw = driver_connection(conn)
    if raw is None:
        with conn.begin_nested():
            yield
        return
    raw.execute("SAVEPOINT frontdesk_step")
    try:
        yield
    except BaseException:
        if raw.in_transaction:  # Unless SQLite ended the whole transaction itself.
            raw.execute("ROLLBACK TO frontdesk_step")
            raw.execute("RELEASE frontdesk_step")
        raise
    raw.execute("RELEASE frontdesk_step")


class Statement:
    """One prebuilt statement (a PostgreSQL variant if its SQL differs there).

    Build it once, at import: building and cache-keying a statement costs more than
    running it on SQLite.
    """

    def __init__(
        self,
        statement: Executable,
        *,
        postgresql: Executable | None = None,
        columns: Sequence[str] | None = None,
    ) -> None:
        """`statement` for SQLite (and every database unless `postgresql` is given);
        `columns`: an INSERT's columns, in the order the driver binds them."""
        self.statement = statement
        self._postgresql = statement if postgresql is None else postgresql
        keys = None if columns is None else list(columns)
        compiled = statement.compile(dialect=_PYSQLITE, column_keys=keys)  # type: ignore[attr-defined]
        self.sql: str = str(compiled)
        """The SQL run on the driver (SQLAlchemy's own compilation for pysqlite)."""
        self._slots = [
            (
                name,
                None if bind.required else bind.effective_value,
                bind.type.dialect_impl(_PYSQLITE).bind_processor(_PYSQLITE),
            )
            for name, bind in ((name, compiled.binds[name]) for name in compiled.positiontup or ())
        ]
        # Each result column's key and SQLAlchemy's decoding of it (timestamps, JSON), so a
        # row read on the driver equals the row read through SQLAlchemy.
        self._columns = [
            (column.keyname, _result_processor(column.type)) for column in compiled._result_columns
        ]
        self._keys = [key for key, _ in self._columns]
        last = {key: index for index, key in enumerate(self._keys)}  # A repeated key: the last.
        self._processed = [
            (index, key, process)
            for index, (key, process) in enumerate(self._columns)
            if process is not None and last[key] == index
        ]

    def for_dialect(self, name: str) -> Executable:
        """The SQLAlchemy statement run on a database of dialect `name`."""
        return self._postgresql if name == "postgresql" else self.statement

    def run(self, conn: Connection, params: Mapping[str, Any]) -> int:
        """Run it once with named `params`, for its effect; returns the rows it changed."""
        raw = driver_connection(conn)
        if raw is None:
            return int(conn.execute(self.for_dialect(conn.dialect.name), params).rowcount)
        return int(self._on_driver(raw, params).rowcount)

    def run_many(self, conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
        """Run it once per row of named parameters (`rows` not empty)."""
        raw = driver_connection(conn)
        if raw is None:
            conn.execute(self.for_dialect(conn.dialect.name), list(rows))
            return
        try:
            raw.executemany(self.sql, [self._bind(row) for row in rows])
        except sqlite3.Error as e:
            raise self._error(e) from e

    def rows(self, conn: Connection, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Run it and return every result row, keyed like SQLAlchemy's `.mappings()`."""
        raw = driver_connection(conn)
        if raw is None:
            result = conn.execute(self.for_dialect(conn.dialect.name), params)
            return [dict(row) for row in result.mappings()]
        cursor = self._on_driver(raw, params)
        return [self._decode(cursor, row) for row in cursor.fetchall()]

    def first(self, conn: Connection, params: Mapping[str, Any]) -> dict[str, Any] | None:
        """Run it and return its first result row (keyed as in `rows`), or `None`."""
        raw = driver_connection(conn)
        if raw is None:
            found = conn.execute(self.for_dialect(conn.dialect.name), params).mappings().first()
            return None if found is None else dict(found)
        cursor = self._on_driver(raw, params)
        row = cursor.fetchone()
        return None if row is None else self._decode(cursor, row)

    def _on_driver(self, raw: sqlite3.Connection, params: Mapping[str, Any]) -> sqlite3.Cursor:
        try:
            return raw.execute(self.sql, self._bind(params))
        except sqlite3.Error as e:
            raise self._error(e) from e

    def _bind(self, params: Mapping[str, Any]) -> tuple[Any, ...]:
        values = []
        for name, default, process in self._slots:
            value = params.get(name, default)
            values.append(value if process is None else process(value))
        return tuple(values)

    def _decode(self, cursor: sqlite3.Cursor, row: Sequence[Any]) -> dict[str, Any]:
        if not self._columns:  # Textual SQL: no typed columns, the driver's names.
            return {column[0]: value for column, value in zip(cursor.description, row, strict=True)}
        decoded = dict(zip(self._keys, row, strict=True))
        for index, key, process in self._processed:  # Timestamps, JSON: the typed columns.
            decoded[key] = process(row[index])
        return decoded

    def _error(self, error: sqlite3.Error) -> StatementError:
        return DBAPIError.instance(self.sql, None, error, sqlite3.Error, hide_parameters=True)
