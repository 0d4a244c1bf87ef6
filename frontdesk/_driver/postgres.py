"""PostgreSQL's side of the seam: the pool's check of a connection at checkout.

SQLAlchemy's pre-ping would ask the server at every checkout: on asyncpg three round trips
(BEGIN, `;`, ROLLBACK), 9 of a turn's 37 (docs/benchmarks.md). asyncpg already knows when
the server closed a connection's socket (a restart, `pg_terminate_backend`), so asking it
costs nothing; a connection lost during a transaction fails that transaction as
invalidated, and the store runs it again from its start (`frontdesk._driver.tx.is_transient`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

__all__ = ["install_hooks"]


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
