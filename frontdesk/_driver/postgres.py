"""PostgreSQL's side of the seam: a transaction of sync SQL in one hop, and the pool's
check of a connection at checkout.

`run` is what `frontdesk.db.run_write`, `run_read` and `run_alone` do on PostgreSQL: check
out a connection, begin, run the caller's sync SQL, commit and check the connection in,
all inside ONE greenlet (SQLAlchemy's bridge from sync code to asyncpg's awaits). Through
`AsyncConnection` each of those steps is a greenlet of its own and an async wrapper
around it (six hops for a one-statement transaction); a warm turn runs four such
transactions, each a single call of a server function, so those hops were a large share
of its client CPU. The SQL, the pool and the transaction are SQLAlchemy's own, as before.

SQLAlchemy's pre-ping would ask the server at every checkout: on asyncpg three round trips
(BEGIN, `;`, ROLLBACK), 9 of a turn's 37 (docs/benchmarks.md). asyncpg already knows when
the server closed a connection's socket (a restart, `pg_terminate_backend`), so asking it
costs nothing; a connection lost during a transaction fails that transaction as
invalidated, and the store runs it again from its start (`frontdesk._driver.tx.is_transient`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection
from sqlalchemy.util import greenlet_spawn

__all__ = ["install_hooks", "run"]

T = TypeVar("T")


def install_hooks(engine: Engine) -> None:
    """Refuse, at checkout, a pooled connection of `engine` the server has closed."""
    event.listen(engine, "checkout", _drop_closed_at_checkout)


def _drop_closed_at_checkout(
    dbapi_connection: Any, record: ConnectionPoolEntry, proxy: PoolProxiedConnection
) -> None:
    """The pool opens a new connection instead of handing out one the server closed."""
    driver = record.driver_connection
    if driver is not None and driver.is_closed():
        raise DisconnectionError("the server closed this pooled connection")


async def run(
    engine: AsyncEngine, work: Callable[[Connection], T], *, options: dict[str, Any] | None = None
) -> T:
    """Run `work` in one transaction on a pooled connection of `engine` (with execution
    `options`, e.g. autocommit), in one hop: committed when it returns, rolled back when it
    raises (or its caller is cancelled: the cancellation reaches `work` at its await)."""
    result: T = await greenlet_spawn(_transaction, engine.sync_engine, work, options)
    return result


def _transaction(
    engine: Engine, work: Callable[[Connection], T], options: dict[str, Any] | None
) -> T:
    """In the greenlet: check out, begin, `work`, commit (or roll back), check in."""
    with engine.connect() as conn:
        if options:
            conn.execution_options(**options)
        with conn.begin():
            return work(conn)
