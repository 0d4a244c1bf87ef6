"""Rewrite a SQLite file so that erased content survives in no free page and no WAL frame.

`PRAGMA secure_delete` (set by the erasure on its own connections) zeroes what a delete or
an update frees from then on; older free pages, and WAL frames of earlier transactions,
may still hold copies. `VACUUM` rebuilds the file from live rows only, and a TRUNCATE
checkpoint copies the WAL into the file and empties it.
"""

from __future__ import annotations

import asyncio
import sqlite3

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver.writer import SQLITE_BUSY_TIMEOUT_MS

__all__ = ["secure_delete", "sqlite_path", "vacuum"]


def secure_delete(conn: Connection) -> None:
    """On SQLite, zero what this connection frees or overwrites from now on (else nothing)."""
    if conn.dialect.name == "sqlite":
        conn.exec_driver_sql("PRAGMA secure_delete=ON")


def sqlite_path(engine: AsyncEngine) -> str | None:
    """The file behind a SQLite engine (`None` for any other database)."""
    if engine.dialect.name != "sqlite":
        return None
    return engine.url.database or None


def _vacuum(path: str) -> None:
    conn = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("VACUUM")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


async def vacuum(path: str) -> None:
    """Checkpoint, `VACUUM` and checkpoint (TRUNCATE) the SQLite file at `path`."""
    await asyncio.to_thread(_vacuum, path)
