"""Leases: named, expiring locks in the database, so that they hold across processes.

A lease row (name, owner, expires_at) is taken by one atomic upsert that only overwrites
an expired row or the caller's own row; the database's row lock (PostgreSQL) or write lock
(SQLite, `BEGIN IMMEDIATE`) makes the check-and-take atomic. No transaction stays open
while the lease is held, so a turn may spend seconds on model calls without blocking the
database; a holder that crashes stops renewing and its lease expires after `ttl`.

A turn takes its conversation's lease in the same transaction as its first write (the user
message) and gives it back in the same transaction as its last (the reply and the audit
batch), so the lease costs no transaction of its own (`TurnLease`). Waiters in the same
process are woken the moment the holder lets go; the database row stays the truth across
processes, where waiters poll with jittered backoff.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import sqlalchemy as sa
import structlog
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver import Statement
from frontdesk._driver.tx import run_sync_tx
from frontdesk.errors import ConversationBusy, LeaseLost
from frontdesk.threads.models import Lease

_lease = Lease.__table__  # type: ignore[attr-defined]
_log = structlog.get_logger("threads.lease")

T = TypeVar("T")

DEFAULT_TTL = 5.0
"""Seconds a lease lives without renewal; a held lease is renewed every `ttl / 3` (its
heartbeat), so a crashed holder's lease runs out within seconds while a slow one keeps it."""


def _take_statement(insert: Any) -> Any:
    owner: sa.BindParameter[str] = sa.bindparam("owner")
    stmt = insert(_lease).values(
        name=sa.bindparam("name"), owner=owner, expires_at=sa.bindparam("expires"), token=1
    )
    # A new owner gets the next fencing token; the holder renewing keeps its own.
    token = sa.case(
        (_lease.c.owner == stmt.excluded.owner, _lease.c.token), else_=_lease.c.token + 1
    )
    return stmt.on_conflict_do_update(
        index_elements=[_lease.c.name],
        set_={"owner": stmt.excluded.owner, "expires_at": stmt.excluded.expires_at, "token": token},
        where=sa.or_(_lease.c.expires_at < sa.bindparam("now"), _lease.c.owner == owner),
    ).returning(_lease.c.token)


# Built once: building a statement costs more than running it.
_TAKE = Statement(_take_statement(sqlite.insert), postgresql=_take_statement(postgresql.insert))
# Giving back keeps the row, expired, so that the next owner's token is still one more.
_GIVE_BACK = Statement(
    sa.update(_lease)
    .where(
        _lease.c.name == sa.bindparam("lease_name"), _lease.c.owner == sa.bindparam("lease_owner")
    )
    .values(expires_at=0.0)
)
# The fence: the lease is still this holder's (same owner, same token), row-locked until the
# transaction ends, so no one can take it over between the check and the commit.
_FENCED = (
    sa.update(_lease)
    .where(
        _lease.c.name == sa.bindparam("lease_name"),
        _lease.c.owner == sa.bindparam("lease_owner"),
        _lease.c.token == sa.bindparam("lease_token"),
        _lease.c.expires_at > 0,
    )
    .values(expires_at=sa.bindparam("expires"))
)
_FENCE = Statement(_FENCED)
FENCE_CTE = _FENCED.returning(_lease.c.token).cte("fence")
"""The fence as the CTE of one PostgreSQL statement (a write that needs the lease selects
`FROM` it): one row while the lease holds, row-locked until that statement's transaction
ends; none when it was lost. Its parameters: `TurnLease.fence_params`."""
_RENEW = (
    sa.update(_lease)
    .where(
        _lease.c.name == sa.bindparam("lease_name"),
        _lease.c.owner == sa.bindparam("lease_owner"),
        _lease.c.expires_at > 0,  # Not given back meanwhile (a renewal racing the release).
    )
    .values(expires_at=sa.bindparam("expires"))
)


def _take(conn: Connection, name: str, owner: str, ttl: float) -> int | None:
    """In `conn`'s transaction: take (or renew) the lease unless another owner holds it.

    Returns the fencing token now held, or `None` when another owner holds the lease.
    """
    now = time.time()
    params = {"name": name, "owner": owner, "expires": now + ttl, "now": now}
    row = _TAKE.first(conn, params)
    return None if row is None else int(row["token"])


def _give_back(conn: Connection, name: str, owner: str) -> None:
    """In `conn`'s transaction: expire the lease if `owner` still holds it."""
    _GIVE_BACK.run(conn, {"lease_name": name, "lease_owner": owner})


def fence(
    conn: Connection,
    name: str,
    owner: str,
    token: int,
    ttl: float,
    subject: str,
    *,
    give_back: bool = False,
) -> None:
    """In `conn`'s transaction: check that `owner` still holds the lease with `token`.

    The check row-locks the lease until the transaction ends (and renews it), so a write
    that follows it in the same transaction lands only while the lease holds. With
    `give_back`, the same statement expires the lease instead of renewing it: the last
    transaction of a holder fences and gives back in one statement, and since the
    transaction commits (or rolls back) as a whole, the lease is given back only with
    its writes.

    Raises:
        LeaseLost: another owner took the lease over (it had expired), or it was given back;
            the caller's transaction must roll back.
    """
    held = _FENCE.run(conn, _fence_params(name, owner, token, ttl, give_back=give_back)) == 1
    if not held:
        raise _lost(subject, token)


def _fence_params(
    name: str, owner: str, token: int, ttl: float, *, give_back: bool = False
) -> dict[str, Any]:
    return {
        "lease_name": name,
        "lease_owner": owner,
        "lease_token": token,
        "expires": 0.0 if give_back else time.time() + ttl,
    }


def _lost(subject: str, token: int | None) -> LeaseLost:
    return LeaseLost(
        f"the turn on conversation {subject!r} lost its lease (fencing token {token}) to "
        "another turn while it ran, so none of its writes were kept; retry with the same "
        "client_message_id",
        conversation_id=subject,
        token=token,
    )


async def try_lease(engine: AsyncEngine, name: str, owner: str, ttl: float) -> bool:
    """Take (or renew) the lease `name` for `owner` unless someone else holds it unexpired."""

    def work(conn: Connection) -> bool:
        return _take(conn, name, owner, ttl) is not None

    return await run_sync_tx(engine, work)


async def renew_lease(engine: AsyncEngine, name: str, owner: str, ttl: float) -> bool:
    """Push the expiry of a lease `owner` holds; `False` when it was lost meanwhile."""

    def work(conn: Connection) -> bool:
        params = {"lease_name": name, "lease_owner": owner, "expires": time.time() + ttl}
        return conn.execute(_RENEW, params).rowcount == 1

    return await run_sync_tx(engine, work)


async def release_lease(engine: AsyncEngine, name: str, owner: str) -> None:
    """Give the lease up if `owner` still holds it."""

    def work(conn: Connection) -> None:
        _give_back(conn, name, owner)

    await run_sync_tx(engine, work)
    _released(engine, name)


class TurnLease:
    """One holder's claim on a lease, taken with a first write and given back with a last.

    `take` waits until the lease is free, then takes it and runs the first write in one
    transaction; `release` runs the last write and gives the lease back in one
    transaction; `aclose` gives it back alone if it is still held (a failed turn). While
    held, the lease is renewed every `ttl / 3`, by a task started only when a turn is
    still running then.
    """

    def __init__(
        self, engine: AsyncEngine, name: str, owner: str, *, wait: float, ttl: float, subject: str
    ) -> None:
        """Describe the claim; nothing is written until `take`."""
        self.engine = engine
        self.name = name
        self.owner = owner
        self.wait = wait
        self.ttl = ttl
        self.subject = subject
        self.held = False
        self.token: int | None = None
        """The fencing token of this claim, once taken."""
        self.started = time.monotonic()
        """When the claim was made (the lease wait counts against a turn's deadline)."""
        self.outcome_of: str | None = None
        """The user message whose outcome this holder stored (committed), if any: its
        finish changes that row rather than upserting it (`_outcomes.save(stored=...)`)."""
        self.asked: str | None = None
        """The user message this holder's start added (committed), if any. Nothing was
        under it then, and a turn writes a failed-turn marker only under the lease (this
        turn's own failure, or a later turn's start once it has taken the lease over), so
        while the fence holds the finish need not look for one (`_outcomes.write_reply`)."""
        self._timer: asyncio.TimerHandle | None = None
        self._renewer: asyncio.Task[None] | None = None

    async def take(self, first: Callable[[Connection], T] | None = None) -> T | None:
        """Wait for the lease, then take it and run `first` (sync SQL) in the same transaction.

        When `first` raises, nothing is written and the lease is not taken.

        Raises:
            ConversationBusy: the lease was not free within `wait` seconds.
        """

        def work(conn: Connection) -> tuple[int | None, T | None]:
            token = _take(conn, self.name, self.owner, self.ttl)
            if token is None:
                return None, None
            return token, None if first is None else first(conn)

        return await self.take_with(work)

    async def take_with(
        self, work: Callable[[Connection], tuple[int | None, T]], *, alone: bool = False
    ) -> T | None:
        """`take` with `work` taking the lease itself (`claim`'s parameters) and running the
        first write: it returns the fencing token (`None`: another owner holds the lease,
        nothing written) and what it wrote. With `alone`, `work` is one statement, its own
        transaction (`run_sync_tx(alone=True)`: the start as one call of the server's).

        Raises:
            ConversationBusy: the lease was not free within `wait` seconds.
        """
        started = time.monotonic()
        delay = 0.002
        while True:
            # Held "maybe" while the transaction runs: a caller cancelled meanwhile still
            # gives it back in `aclose` (deleting a lease one does not hold does nothing).
            self.held = True
            try:
                token, result = await run_sync_tx(self.engine, work, alone=alone)
            except BaseException as e:
                self.held = isinstance(e, asyncio.CancelledError)
                raise
            self.held = token is not None
            if token is not None:
                self.token = token
                self._timer = asyncio.get_running_loop().call_later(self.ttl / 3, self._renew)
                return result
            waited = time.monotonic() - started
            if waited >= self.wait:
                raise ConversationBusy(
                    f"conversation {self.subject!r} is busy: another turn held it for "
                    f"{waited:.1f} s; retry later",
                    conversation_id=self.subject,
                    waited=waited,
                )
            await _until_released(
                self.engine, self.name, min(delay * random.uniform(0.5, 1.5), self.wait - waited)
            )
            delay = min(delay * 2, 0.1)

    def fence(self, conn: Connection, *, give_back: bool = False) -> None:
        """In `conn`'s transaction: make sure this claim still holds (see `_lease.fence`);
        with `give_back`, give it back in the same statement (the holder's last write).

        Raises:
            LeaseLost: another owner took the lease over; roll the transaction back.
        """
        token = self._taken()
        fence(conn, self.name, self.owner, token, self.ttl, self.subject, give_back=give_back)

    def claim(self) -> dict[str, Any]:
        """The parameters of a server-side take of this lease (`take_with`): its name and
        owner, the expiry a take gives it, and now (an expired lease may be taken)."""
        now = time.time()
        return {
            "lease_name": self.name,
            "lease_owner": self.owner,
            "lease_expires": now + self.ttl,
            "lease_now": now,
        }

    def fence_params(self) -> dict[str, Any]:
        """The parameters of `FENCE_CTE` for this claim (renewing it).

        Raises:
            LeaseLost: the lease was never taken.
        """
        return _fence_params(self.name, self.owner, self._taken(), self.ttl)

    def _taken(self) -> int:
        if self.token is None:
            raise LeaseLost(
                f"the lease on conversation {self.subject!r} was never taken; take it first",
                conversation_id=self.subject,
                token=None,
            )
        return self.token

    def lost(self) -> LeaseLost:
        """The error of a fenced write that found the lease taken over (`FENCE_CTE` empty)."""
        return _lost(self.subject, self.token)

    async def release(self, last: Callable[[Connection], T]) -> T:
        """Check the fence, run `last` (sync SQL) and give the lease back, in one transaction.

        When the transaction fails, the lease is still held (call `aclose`).

        Raises:
            LeaseLost: the lease was taken over meanwhile; nothing of `last` was written.
        """

        def work(conn: Connection) -> T:
            self.fence(conn, give_back=True)  # One statement: checked and given back.
            return last(conn)

        self._stop_renewing()
        result = await run_sync_tx(self.engine, work)
        self.held = False
        _released(self.engine, self.name)
        return result

    async def release_with(self, work: Callable[[Connection], bool]) -> None:
        """`release` as one call of the database's (`work`, its own transaction, fences
        and gives the lease back with the last writes; `False`: the lease was lost and
        nothing was written).

        Raises:
            LeaseLost: the lease was taken over meanwhile; nothing was written.
        """
        self._stop_renewing()
        if not await run_sync_tx(self.engine, work, alone=True):
            raise self.lost()
        self.held = False
        _released(self.engine, self.name)

    async def aclose(self) -> None:
        """Give the lease back if it is still held (shielded from cancellation)."""
        self._stop_renewing()
        if self.held:
            with anyio.CancelScope(shield=True):
                await release_lease(self.engine, self.name, self.owner)
            self.held = False

    def _renew(self) -> None:
        self._timer = None
        if self.held:
            self._renewer = asyncio.get_running_loop().create_task(
                _keep_renewed(self.engine, self.name, self.owner, self.ttl)
            )

    def _stop_renewing(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None


@asynccontextmanager
async def hold_lease(
    engine: AsyncEngine, name: str, owner: str, *, wait: float, ttl: float, subject: str
) -> AsyncIterator[None]:
    """Wait for the lease (polling with jittered backoff), hold it while the body runs.

    Raises:
        ConversationBusy: the lease was not free within `wait` seconds.
    """
    lease = TurnLease(engine, name, owner, wait=wait, ttl=ttl, subject=subject)
    await lease.take()
    try:
        yield
    finally:
        await lease.aclose()


async def _keep_renewed(engine: AsyncEngine, name: str, owner: str, ttl: float) -> None:
    while True:
        try:
            if not await renew_lease(engine, name, owner, ttl):
                _log.warning("lease.lost", lease=name)
                return
        except Exception as e:  # A failed renewal must not kill the turn; the next may work.
            _log.warning("lease.renew_failed", lease=name, error=type(e).__name__)
        await anyio.sleep(ttl / 3)


# In-process wake-ups: (engine, lease name) -> the event its waiters in this process await.
_releases: dict[tuple[int, str], tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}


async def _until_released(engine: AsyncEngine, name: str, longest: float) -> None:
    """Sleep up to `longest` seconds, or less when a holder in this process lets go."""
    key = (id(engine.sync_engine), name)
    loop = asyncio.get_running_loop()
    entry = _releases.get(key)
    if entry is None or entry[0] is not loop:
        entry = (loop, asyncio.Event())
        _releases[key] = entry
    with anyio.move_on_after(longest):
        await entry[1].wait()


def _released(engine: AsyncEngine, name: str) -> None:
    entry = _releases.pop((id(engine.sync_engine), name), None)
    if entry is not None:
        entry[1].set()
