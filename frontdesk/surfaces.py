"""Where a value occurs at rest: every table of a database, full-text indexes included.

`frontdesk privacy audit-surfaces VALUE` (a support engineer checking a deployment, a
bank's reviewer counting where a PIN ended up) reads every row of every table and counts
the value in each column, text, JSON and bytes alike (an encrypted audit payload holds it
only as ciphertext, so it is not counted there: that is the point). FTS5 tables are also
asked through `MATCH`, which finds a term in their index even where its blocks are
prefix-compressed. Slow on a large database by design: it reads everything.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk.db import run_read

__all__ = ["Occurrence", "count_in", "occurrences_at_rest"]


@dataclass(frozen=True)
class Occurrence:
    """`count` clear occurrences of the value at `place` (`table.column`, or a route)."""

    place: str
    count: int


Decode = Callable[[bytes], bytes]
"""Reads a stored byte form back as text (the audit's deflated payloads): compression is not
encryption, so what inflates is read; what does not (ciphertext) raises `ValueError`."""


def count_in(value: Any, needle: str, decode: Decode | None = None) -> int:
    """Clear occurrences of `needle` in a stored value (text, bytes, JSON, numbers)."""
    if value is None or not needle:
        return 0
    if isinstance(value, str):
        return value.count(needle)
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        if decode is not None:
            with contextlib.suppress(ValueError):
                data = decode(data)
        return data.count(needle.encode())
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False).count(needle)
    return str(value).count(needle)


def _tables(conn: Connection) -> list[str]:
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
        )
        return [r[0] for r in rows]
    return sorted(sa.inspect(conn).get_table_names())


def _fts5(conn: Connection) -> list[str]:
    if conn.dialect.name != "sqlite":
        return []
    rows = conn.exec_driver_sql(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%USING fts5%'"
    )
    return [r[0] for r in rows]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _scan(conn: Connection, needle: str, decode: Decode | None) -> Iterator[Occurrence]:
    for table in _tables(conn):
        counts: dict[str, int] = {}
        try:
            with conn.begin_nested():  # A table this role may not read leaves the rest readable.
                result = conn.exec_driver_sql(f"SELECT * FROM {_quoted(table)}")
                columns = list(result.keys())
                counts = dict.fromkeys(columns, 0)
                for row in result:
                    for column, value in zip(columns, row, strict=True):
                        counts[column] += count_in(value, needle, decode)
        except sa.exc.DBAPIError:
            continue
        for column, n in counts.items():
            if n:
                yield Occurrence(f"{table}.{column}", n)
    for table in _fts5(conn):
        phrase = '"' + needle.replace('"', '""') + '"'
        try:
            found = conn.exec_driver_sql(
                f"SELECT count(*) FROM {_quoted(table)} WHERE {_quoted(table)} MATCH ?",
                (phrase,),
            ).scalar_one()
        except sa.exc.DBAPIError:  # A phrase FTS5 cannot parse: the row scan stands.
            continue
        if found:
            yield Occurrence(f"{table} (full-text index)", int(found))


async def occurrences_at_rest(
    engine: AsyncEngine, needle: str, *, decode: Decode | None = None
) -> list[Occurrence]:
    """Every `table.column` of the database holding `needle` in clear, with its count;
    byte values are read through `decode` first when given (`audit.compact.inflate_bytes`)."""
    return await run_read(engine, lambda conn: list(_scan(conn, needle, decode)))
