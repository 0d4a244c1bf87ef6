"""Leases: named, expiring locks in the database, so that they hold across processes.

A lease row (name, owner, expires_at) is taken by one atomic upsert that only overwrites
an expired row or the caller's own row; the database's row lock (PostgreSQL) or write lock
(SQLite, `BEGIN IMMEDIATE`) makes the check-and-take atomic. No transaction stays open
while the lease is held, so a turn may spend seconds on model calls without blocking the
database; a holder that crashes stops renewing and its lease expires after `ttl`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import sqlalchemy as sa
import structlog
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from threads._tx import run_tx
from threads.errors import ConversationBusy
from threads.models import Lease

_lease = Lease.__table__  # type: ignore[attr-defined]
_log = structlog.get_logger("threads.lease")

DEFAULT_TTL = 15.0
"""Seconds a lease lives without renewal; a held lease is renewed every `ttl / 3`."""


async def try_lease(engine: AsyncEngine, name: str, owner: str, ttl: float) -> bool:
    """Take (or renew) the lease `name` for `owner` unless someone else holds it unexpired."""

    async def work(conn: AsyncConnection) -> bool:
        now = time.time()
        insert: Any = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert
        stmt = insert(_lease).values(name=name, owner=owner, expires_at=now + ttl)
        stmt = stmt.on_conflict_do_update(
            index_elements=[_lease.c.name],
            set_={"owner": stmt.excluded.owner, "expires_at": stmt.excluded.expires_at},
            where=sa.or_(_lease.c.expires_at < now, _lease.c.owner == owner),
        ).returning(_lease.c.owner)
        return (await conn.execute(stmt)).first() is not None

    return await run_tx(engine, work)


async def renew_lease(engine: AsyncEngine, name: str, owner: str, ttl: float) -> bool:
    """Push the expiry of a lease `owner` holds; `False` when it was lost meanwhile."""

    async def work(conn: AsyncConnection) -> bool:
        stmt = (
            sa.update(_lease)
            .where(_lease.c.name == name, _lease.c.owner == owner)
            .values(expires_at=time.time() + ttl)
        )
        return (await conn.execute(stmt)).rowcount == 1

    return await run_tx(engine, work)


async def release_lease(engine: AsyncEngine, name: str, owner: str) -> None:
    """Give the lease up if `owner` still holds it."""

    async def work(conn: AsyncConnection) -> None:
        await conn.execute(sa.delete(_lease).where(_lease.c.name == name, _lease.c.owner == owner))

    await run_tx(engine, work)


@asynccontextmanager
async def hold_lease(
    engine: AsyncEngine, name: str, owner: str, *, wait: float, ttl: float, subject: str
) -> AsyncIterator[None]:
    """Wait for the lease (polling with jittered backoff), hold it while the body runs.

    Raises:
        ConversationBusy: the lease was not free within `wait` seconds.
    """
    started = time.monotonic()
    delay = 0.002
    while not await try_lease(engine, name, owner, ttl):
        waited = time.monotonic() - started
        if waited >= wait:
            raise ConversationBusy(
                f"conversation {subject!r} is busy: another turn held it for {waited:.1f} s; "
                "retry later",
                conversation_id=subject,
                waited=waited,
            )
        await anyio.sleep(min(delay * random.uniform(0.5, 1.5), wait - waited))
        delay = min(delay * 2, 0.1)
    renewer = asyncio.create_task(_keep_renewed(engine, name, owner, ttl))
    try:
        yield
    finally:
        renewer.cancel()
        with anyio.CancelScope(shield=True):
            await release_lease(engine, name, owner)


async def _keep_renewed(engine: AsyncEngine, name: str, owner: str, ttl: float) -> None:
    while True:
        await anyio.sleep(ttl / 3)
        try:
            if not await renew_lease(engine, name, owner, ttl):
                _log.warning("lease.lost", lease=name)
                return
        except Exception as e:  # A failed renewal must not kill the turn; the next may work.
            _log.warning("lease.renew_failed", lease=name, error=type(e).__name__)
