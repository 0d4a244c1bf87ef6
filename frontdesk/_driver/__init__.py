"""The fast path, all of it: what runs differently on one driver, so that callers need not.

What belongs here, and only here:

- `writer`: the SQLite writer thread behind `frontdesk.db.run_write`. Every write
  transaction of a process's SQLite database runs there, in one hop, and the writes queued
  meanwhile are group-committed (one `BEGIN IMMEDIATE`, a savepoint each, one `COMMIT`).
  Also the connection settings (WAL, busy timeout) and `write_slot`.
- `reader`: the SQLite reader thread behind `frontdesk.db.run_read`: a read transaction
  (a WAL snapshot) in one hop, on a connection of its own that refuses writes, so a read
  never waits for the writer nor holds it.
- `postgres`: a PostgreSQL transaction of sync SQL in one greenlet hop (checkout, begin,
  work, commit, check-in; through `AsyncConnection` each step was a hop of its own), and the
  pool's check at checkout, which costs no round trip (instead of SQLAlchemy's pre-ping).
- `Statement`: a prebuilt statement the store and the audit log run on any sync
  `Connection` without asking which driver is under it. On the writer's and the reader's
  pysqlite connections, and on asyncpg's inside a transaction, it runs straight on the
  DBAPI connection (same SQL, binds and decoding as SQLAlchemy's, same typed errors);
  elsewhere through `Connection.execute`.
- `jsontext`: the JSON columns' serializer, given to every engine's dialect and to the
  `Statement`s' own: `json.dumps`'s text, with its encoder made once.

Code outside this package never branches on the driver.
"""

from frontdesk._driver.statement import Statement, savepoint

__all__ = ["Statement", "savepoint"]
