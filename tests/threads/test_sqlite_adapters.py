"""The SQLite driver binds `None` and `bytes` through an adapter that gives them back
(`frontdesk._driver.statement._ADAPTED`): what is stored is what was bound before."""

from __future__ import annotations

import sqlite3

from frontdesk._driver import statement


def test_none_and_bytes_are_bound_as_they_are() -> None:
    for kind in statement._ADAPTED:
        adapter = sqlite3.adapters[(kind, sqlite3.PrepareProtocol)]
        value = None if kind is type(None) else b"\x00\xffblob"
        assert adapter(value) is value
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a, b, c)")
    conn.execute("INSERT INTO t VALUES (?, ?, ?)", (None, b"\x00\xffblob", True))
    row = conn.execute("SELECT a, typeof(a), b, typeof(b), c, typeof(c) FROM t").fetchone()
    assert row == (None, "null", b"\x00\xffblob", "blob", 1, "integer")


def test_an_adapter_the_application_registered_first_is_kept() -> None:
    key = (bytes, sqlite3.PrepareProtocol)
    ours = sqlite3.adapters.pop(key)
    try:
        sqlite3.register_adapter(bytes, bytearray)  # The application's, before the driver.
        statement.adapt_as_they_are()
        assert sqlite3.adapters[key] is bytearray
    finally:
        sqlite3.adapters[key] = ours
