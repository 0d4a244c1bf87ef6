"""The driver's own check that a SQLite file opens, before any async connection is made
(the seam: only `frontdesk._driver` talks to the driver itself)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from frontdesk.errors import StoreUnavailable


def can_open_sqlite(path: str) -> None:
    """Open the SQLite file once, synchronously, before any async connection is made.

    A file that cannot be opened (its folder missing, no permission, not a database) is
    said here as one error: through aiosqlite the failed connect leaves its thread posting
    to an event loop that `asyncio.run` has closed by then, and Python prints that thread's
    traceback ("Event loop is closed") before the command's own one-line error.

    Raises:
        StoreUnavailable: the file cannot be opened or read.
    """
    if path.startswith("file:"):
        return  # A URI filename with its own options: left to the driver.
    try:
        conn = sqlite3.connect(path, timeout=0)
        try:
            conn.execute("PRAGMA schema_version").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as e:
        if "locked" in str(e):
            return  # It opens; waiting for a lock is the connections' busy timeout's job.
        folder = Path(path).parent
        why = f"; the folder {folder} does not exist" if not folder.is_dir() else ""
        raise StoreUnavailable(f"cannot open the database file {path}: {e}{why}") from None
