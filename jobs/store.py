"""Job rows: every SQL statement on the job tables (revision `0012_jobs`, docs/jobs.md).

A job is recorded in the transaction of the row that causes it (`defer`, run inside the
reply's own write), so a crash after that commit loses nothing. On PostgreSQL the rows are
Procrastinate's (`procrastinate_jobs`, written through its `procrastinate_defer_jobs_v1`
function, run by its workers); `job_error` keeps each job's last error beside them. On
SQLite the rows are `job` (the same fields) and this module also holds the in-process
runner's claims: the oldest due job whose lock no earlier job holds, as Procrastinate's
`procrastinate_fetch_job_v2` picks it, so one lock's jobs run one at a time, in order.

`job_done` holds the idempotency key of each job whose effect is stored, written in the
effect's own transaction (`mark_done`), so a job run twice changes nothing the second time.

Also here (revision `0019_jobs_more`): a job postponed while its caller runs its work itself
(`postpone`, `complete`: the erasure's), the ticks an exclusive periodic job claims on
SQLite (`claim_tick`, one runner per period), and which runners are alive (`runners_alive`:
Procrastinate's `procrastinate_workers` on PostgreSQL, `job_worker` heartbeats on SQLite).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver import Statement
from frontdesk._driver.tx import run_sync_tx
from frontdesk.db import UTCDateTime, utcnow

__all__ = [
    "PERIODIC_QUEUE",
    "QUEUE",
    "JobRow",
    "JobSpec",
    "JobStatus",
    "JobStore",
    "beat",
    "cancel",
    "claim",
    "claim_tick",
    "complete",
    "defer",
    "due",
    "finish",
    "is_done",
    "list_jobs",
    "mark_done",
    "outstanding",
    "postpone",
    "record_error",
    "register_runner",
    "rename_lock",
    "renew",
    "retry",
    "runners_alive",
    "statuses",
    "unregister_runner",
]

QUEUE = "frontdesk"
"""The queue every frontdesk job is recorded on (listed by `frontdesk jobs`)."""
PERIODIC_QUEUE = "frontdesk-periodic"
"""The queue of Procrastinate's periodic ticks (derived work, not listed, not drained)."""

JobStatus = Literal["todo", "doing", "succeeded", "failed", "cancelled", "aborted"]

_meta = sa.MetaData()
job_table = sa.Table(
    "job",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("queue_name", sa.String(128), nullable=False),
    sa.Column("task_name", sa.String(128), nullable=False),
    sa.Column("lock", sa.Text),
    sa.Column("queueing_lock", sa.Text),
    sa.Column("args", sa.JSON, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("scheduled_at", UTCDateTime),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("leased_until", sa.Float),
    sa.Column("last_error", sa.Text),
    sa.Column("created_at", UTCDateTime, nullable=False),
)
job_error_table = sa.Table(
    "job_error",
    _meta,
    sa.Column("job_id", sa.BigInteger, primary_key=True),
    sa.Column("error", sa.Text, nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
)
job_done_table = sa.Table(
    "job_done",
    _meta,
    sa.Column("key", sa.String(300), primary_key=True),
    sa.Column("done_at", UTCDateTime, nullable=False),
)
job_periodic_table = sa.Table(
    "job_periodic",
    _meta,
    sa.Column("name", sa.String(128), primary_key=True),
    sa.Column("tick", sa.BigInteger, nullable=False),
    sa.Column("at", UTCDateTime, nullable=False),
)
job_worker_table = sa.Table(
    "job_worker",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("heartbeat", sa.Float, nullable=False),
    sa.Column("started_at", UTCDateTime, nullable=False),
)
_j, _e, _d = job_table, job_error_table, job_done_table
_p, _w = job_periodic_table, job_worker_table

MAX_ERROR_CHARS = 2000
"""Longest last error kept (the rest is cut)."""


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """One job to record: its kind (the task name), arguments and ordering."""

    kind: str
    args: dict[str, Any] = field(default_factory=dict)
    """JSON arguments (ids only: no personal data in a job row)."""
    lock: str | None = None
    """Jobs with the same lock run one at a time, in the order they were recorded."""
    queueing_lock: str | None = None
    """At most one job with this key waits to run (a second one is not recorded)."""
    scheduled_at: datetime | None = None
    """Not before this time (`None`: at once)."""


@dataclass(frozen=True, kw_only=True)
class JobRow:
    """A recorded job, as `frontdesk jobs` lists it."""

    id: int
    kind: str
    status: str
    attempts: int
    """Runs started so far (a job failing three times shows 3)."""
    lock: str | None
    args: dict[str, Any]
    scheduled_at: datetime | None
    last_error: str | None

    def as_json(self) -> dict[str, Any]:
        """The row as `frontdesk jobs --json` prints it."""
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "attempts": self.attempts,
            "key": self.lock,
            "args": self.args,
            "scheduled_at": None if self.scheduled_at is None else self.scheduled_at.isoformat(),
            "last_error": self.last_error,
        }


def _pg(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


_DEFER_PG = sa.text(
    "INSERT INTO procrastinate_jobs"
    " (queue_name, task_name, priority, lock, queueing_lock, args, scheduled_at)"
    " SELECT e.j->>'queue', e.j->>'task', 0, e.j->>'lock', e.j->>'qlock', e.j->'args',"
    " CAST(e.j->>'at' AS timestamptz)"
    " FROM jsonb_array_elements(CAST(:jobs AS jsonb)) WITH ORDINALITY AS e(j, n) ORDER BY e.n"
    " ON CONFLICT (queueing_lock) WHERE status = 'todo' DO NOTHING"
    " RETURNING id, task_name, lock"
)
"""One statement: the jobs travel as one JSON parameter (no value is formatted into SQL).
It is the body of Procrastinate's `procrastinate_defer_jobs_v1`, which raises on a taken
queueing lock (aborting the caller's transaction, the reply's); this skips the job."""


def _pg_jobs(specs: Sequence[JobSpec]) -> str:
    return json.dumps(
        [
            {
                "queue": QUEUE,
                "task": s.kind,
                "lock": s.lock,
                "qlock": s.queueing_lock,
                "args": s.args,
                "at": None if s.scheduled_at is None else s.scheduled_at.isoformat(),
            }
            for s in specs
        ],
        separators=(",", ":"),
    )


class Deferred(NamedTuple):
    """A job `defer` recorded: its id, kind and lock."""

    id: int
    kind: str
    lock: str | None


def defer(conn: Connection, specs: Sequence[JobSpec]) -> list[Deferred]:
    """Record `specs` in the caller's transaction (one statement); returns the jobs
    recorded, in order. A spec whose `queueing_lock` already has a job waiting is not
    recorded (it has no entry): the waiting job does its work."""
    if not specs:
        return []
    if _pg(conn):
        found = conn.execute(_DEFER_PG, {"jobs": _pg_jobs(specs)})
        return [Deferred(int(r[0]), r[1], r[2]) for r in found]
    now = utcnow()
    rows = [
        {
            "queue_name": QUEUE,
            "task_name": s.kind,
            "lock": s.lock,
            "queueing_lock": s.queueing_lock,
            "args": s.args,
            "status": "todo",
            "scheduled_at": s.scheduled_at,
            "attempts": 0,
            "created_at": now,
        }
        for s in specs
    ]
    if len(rows) == 1:  # Most often: a turn's one job (learning, or a compaction).
        one = _DEFER_ONE.first(conn, rows[0])
        if one is None:
            return []
        return [Deferred(int(one["id"]), one["task_name"], one["lock"])]
    stmt = (
        sqlite.insert(_j)
        .values(rows)
        .on_conflict_do_nothing()
        .returning(_j.c.id, _j.c.task_name, _j.c.lock)
    )
    return [Deferred(int(r[0]), r[1], r[2]) for r in conn.execute(stmt)]


_DEFER_COLUMNS = [
    "queue_name",
    "task_name",
    "lock",
    "queueing_lock",
    "args",
    "status",
    "scheduled_at",
    "attempts",
    "created_at",
]
_DEFER_ONE = Statement(
    sqlite.insert(_j).on_conflict_do_nothing().returning(_j.c.id, _j.c.task_name, _j.c.lock),
    columns=_DEFER_COLUMNS,
)
"""`defer`'s insert of one job (SQLite), built once: building a multi-row insert costs
more than SQLite's work."""


# -- idempotency ----------------------------------------------------------------------


def is_done(conn: Connection, key: str) -> bool:
    """Whether the effect of the job with idempotency key `key` is stored."""
    return conn.execute(sa.select(_d.c.key).where(_d.c.key == key)).first() is not None


def mark_done(conn: Connection, key: str) -> None:
    """Record, in the effect's own transaction, that the job `key` took effect."""
    insert: Any = (postgresql if _pg(conn) else sqlite).insert
    conn.execute(
        insert(_d).values(key=key, done_at=utcnow()).on_conflict_do_nothing(index_elements=["key"])
    )


def rename_lock(conn: Connection, old: str, new: str) -> int:
    """Give the jobs of lock `old` the lock `new` (an erasure renames a user's memory jobs
    from the plain digest older versions locked them by); one running now keeps its lock.
    How many were renamed."""
    if _pg(conn):
        sql = "UPDATE procrastinate_jobs SET lock = :new WHERE lock = :old AND status <> 'doing'"
        return int(conn.execute(sa.text(sql), {"old": old, "new": new}).rowcount or 0)
    query = sa.update(_j).where(_j.c.lock == old, _j.c.status != "doing").values(lock=new)
    return int(conn.execute(query).rowcount or 0)


# -- listing and mending (both backends) -----------------------------------------------

_PG_LIST = """
SELECT j.id, j.task_name, j.status::text AS status, j.lock, j.args, j.scheduled_at,
       j.attempts + CASE WHEN j.status = 'doing' THEN 1 ELSE 0 END
           AS attempts,
       e.error AS last_error
  FROM procrastinate_jobs j LEFT JOIN job_error e ON e.job_id = j.id
 WHERE j.queue_name = :queue AND CAST(j.status AS text) = ANY(:statuses)
 ORDER BY j.id
 LIMIT :limit
"""


def statuses(failed_only: bool) -> tuple[str, ...]:
    """The statuses `frontdesk jobs` lists: pending, running and failed (or failed only)."""
    return ("failed",) if failed_only else ("todo", "doing", "failed")


def list_jobs(
    conn: Connection, *, status: Sequence[str] = ("todo", "doing", "failed"), limit: int = 500
) -> list[JobRow]:
    """The jobs in `status`, oldest first."""
    if _pg(conn):
        rows = conn.execute(
            sa.text(_PG_LIST),
            {"queue": QUEUE, "statuses": list(status), "limit": limit},
        ).mappings()
        return [
            JobRow(
                id=int(r["id"]),
                kind=r["task_name"],
                status=r["status"],
                attempts=int(r["attempts"]),
                lock=r["lock"],
                args=dict(r["args"] or {}),
                scheduled_at=r["scheduled_at"],
                last_error=r["last_error"],
            )
            for r in rows
        ]
    stmt = sa.select(_j).where(_j.c.status.in_(list(status))).order_by(_j.c.id).limit(limit)
    return [_row(r) for r in conn.execute(stmt).mappings()]


def _row(r: Any) -> JobRow:
    return JobRow(
        id=int(r["id"]),
        kind=r["task_name"],
        status=r["status"],
        attempts=int(r["attempts"]),
        lock=r["lock"],
        args=dict(r["args"] or {}),
        scheduled_at=r["scheduled_at"],
        last_error=r["last_error"],
    )


def outstanding(
    conn: Connection, ids: Sequence[int] | None = None, *, exclude: Sequence[str] = ()
) -> int:
    """How many jobs (of `ids`, or all but the kinds `exclude`) are to run or running."""
    if _pg(conn):
        sql = "SELECT count(*) FROM procrastinate_jobs WHERE queue_name = :queue"
        sql += " AND status IN ('todo', 'doing')"
        params: dict[str, Any] = {"queue": QUEUE}
        if ids is not None:
            sql += " AND id = ANY(:ids)"
            params["ids"] = [int(i) for i in ids]
        if exclude:
            sql += " AND NOT task_name = ANY(:exclude)"
            params["exclude"] = list(exclude)
        return int(conn.execute(sa.text(sql), params).scalar_one())
    stmt = sa.select(sa.func.count()).select_from(_j).where(_j.c.status.in_(["todo", "doing"]))
    if ids is not None:
        stmt = stmt.where(_j.c.id.in_(list(ids)))
    if exclude:
        stmt = stmt.where(_j.c.task_name.not_in(list(exclude)))
    return int(conn.execute(stmt).scalar_one())


def retry(conn: Connection, job_id: int) -> bool:
    """Run a failed (or cancelled) job again, at once; `False` when it is not one."""
    if _pg(conn):
        found = conn.execute(
            sa.text(
                "SELECT status::text FROM procrastinate_jobs WHERE id = :id AND queue_name = :q"
                " FOR UPDATE"
            ),
            {"id": job_id, "q": QUEUE},
        ).scalar()
        if found not in ("failed", "cancelled", "aborted"):
            return False
        if found == "failed":
            conn.execute(
                sa.text("SELECT procrastinate_retry_job_v2(:id, now(), NULL, NULL, NULL)"),
                {"id": job_id},
            )
        else:  # Procrastinate retries failed jobs only; a cancelled one goes back to todo.
            conn.execute(
                sa.text(
                    "UPDATE procrastinate_jobs SET status = 'todo', scheduled_at = NULL,"
                    " abort_requested = false WHERE id = :id"
                ),
                {"id": job_id},
            )
        return True
    done = conn.execute(
        sa.update(_j)
        .where(_j.c.id == job_id, _j.c.status.in_(["failed", "cancelled", "aborted"]))
        .values(status="todo", scheduled_at=None, leased_until=None)
    )
    return done.rowcount == 1


def cancel(conn: Connection, job_id: int) -> bool:
    """Cancel a job still waiting to run; `False` when it is running or finished."""
    if _pg(conn):
        found = conn.execute(
            sa.text("SELECT procrastinate_cancel_job_v1(:id, false, false)"), {"id": job_id}
        ).scalar()
        return found is not None
    done = conn.execute(
        sa.update(_j).where(_j.c.id == job_id, _j.c.status == "todo").values(status="cancelled")
    )
    return done.rowcount == 1


def record_error(conn: Connection, job_id: int, error: str) -> None:
    """Keep `error` as the last error of job `job_id` (PostgreSQL's `job_error`)."""
    error = error[:MAX_ERROR_CHARS]
    if _pg(conn):
        conn.execute(
            postgresql.insert(_e)
            .values(job_id=job_id, error=error, at=utcnow())
            .on_conflict_do_update(index_elements=["job_id"], set_={"error": error, "at": utcnow()})
        )
        return
    conn.execute(sa.update(_j).where(_j.c.id == job_id).values(last_error=error))


# -- the in-process runner's claims (SQLite) ---------------------------------------------


def _runnable() -> Any:
    """Due `todo`, or `doing` with a dead lease (`:now` the UTC time, `:stamp` epoch seconds)."""
    when = sa.or_(
        _j.c.scheduled_at.is_(None),
        _j.c.scheduled_at <= sa.bindparam("now", type_=_j.c.scheduled_at.type),
    )
    return sa.or_(
        sa.and_(_j.c.status == "todo", when),
        sa.and_(_j.c.status == "doing", _j.c.leased_until < sa.bindparam("stamp", type_=sa.Float)),
    )


_other = _j.alias("other")
_stamp = sa.bindparam("stamp", type_=sa.Float)
_blocked = sa.exists().where(
    _other.c.lock == _j.c.lock,
    _other.c.id != _j.c.id,
    sa.or_(
        sa.and_(_other.c.status == "doing", _other.c.leased_until >= _stamp),
        # `status IN ('todo', 'doing')`, spelt out: an IN list is expanded per call.
        sa.and_(
            sa.or_(_other.c.status == "todo", _other.c.status == "doing"), _other.c.id < _j.c.id
        ),
    ),
)
_NEXT = Statement(
    sa.select(_j.c.id)
    .where(_j.c.queue_name == QUEUE, _runnable(), sa.or_(_j.c.lock.is_(None), ~_blocked))
    .order_by(_j.c.id)
    .limit(1)
)
"""The job `claim` takes. Statements built once: building and cache-keying these cost
more than SQLite's work, and a runner looks after every job."""
_TAKE = Statement(
    sa.update(_j)
    .where(_j.c.id == sa.bindparam("job"))
    .values(status="doing", leased_until=sa.bindparam("until"), attempts=_j.c.attempts + 1)
    .returning(*_j.c)
)
_DUE = Statement(sa.select(_j.c.id).where(_runnable()).limit(1))


def claim(conn: Connection, *, lease: float, now: float | None = None) -> JobRow | None:
    """Take the next job to run (SQLite): the oldest due `todo` job (or `doing` one whose
    runner's lease ran out) that no earlier job of its lock is ahead of or running.

    Marks it `doing` with a lease of `lease` seconds and counts the attempt. Run it in a
    write transaction (SQLite's `BEGIN IMMEDIATE`: one claimer at a time)."""
    stamp = time.time() if now is None else now
    found = _NEXT.first(conn, {"now": utcnow(), "stamp": stamp})
    if found is None:
        return None
    row = _TAKE.first(conn, {"job": found["id"], "until": stamp + lease})
    assert row is not None, "the job just picked is there (the claim's write lock holds)"
    return _row(row)


def renew(conn: Connection, job_id: int, *, lease: float) -> None:
    """Extend the lease of a running job (SQLite)."""
    until = time.time() + lease
    conn.execute(
        sa.update(_j).where(_j.c.id == job_id, _j.c.status == "doing").values(leased_until=until)
    )


def finish(
    conn: Connection,
    job_id: int,
    status: Literal["succeeded", "failed", "todo"],
    *,
    error: str | None = None,
    retry_in: float | None = None,
) -> None:
    """End a run (SQLite): `succeeded`, `failed` for good, or `todo` again in `retry_in`
    seconds (a failure with attempts left, or a run given back at shutdown)."""
    values: dict[str, Any] = {"status": status, "leased_until": None}
    if error is not None:
        values["last_error"] = error[:MAX_ERROR_CHARS]
    if status == "todo":
        values["scheduled_at"] = utcnow() + timedelta(seconds=retry_in or 0.0)
    conn.execute(sa.update(_j).where(_j.c.id == job_id, _j.c.status == "doing").values(**values))


# -- a job its caller runs itself (the erasure's) ---------------------------------------


def postpone(conn: Connection, job_id: int, until: datetime) -> bool:
    """Push a waiting job's time to `until` (a caller running the job's work itself keeps
    it from coming due meanwhile); `False` when it is no longer waiting."""
    if _pg(conn):
        done = conn.execute(
            sa.text(
                "UPDATE procrastinate_jobs SET scheduled_at = :at"
                " WHERE id = :id AND status = 'todo'"
            ),
            {"id": job_id, "at": until},
        )
    else:
        done = conn.execute(
            sa.update(_j).where(_j.c.id == job_id, _j.c.status == "todo").values(scheduled_at=until)
        )
    return bool(done.rowcount)


def complete(conn: Connection, job_id: int) -> None:
    """A waiting job whose work its caller did: deleted (PostgreSQL: as Procrastinate's
    workers delete a succeeded job) or `succeeded` (SQLite)."""
    if _pg(conn):
        conn.execute(
            sa.text("SELECT procrastinate_cancel_job_v1(:id, false, true)"), {"id": job_id}
        )
        return
    conn.execute(
        sa.update(_j).where(_j.c.id == job_id, _j.c.status == "todo").values(status="succeeded")
    )


# -- exclusive periodic jobs and live runners (SQLite; PostgreSQL: Procrastinate's) ------


def claim_tick(conn: Connection, name: str, tick: int) -> bool:
    """Whether this runner takes tick `tick` of the periodic job `name` (SQLite): the
    first claimer of a tick wins, every later one (another process) is told no."""
    insert = sqlite.insert(_p).values(name=name, tick=tick, at=utcnow())
    stmt = insert.on_conflict_do_update(
        index_elements=["name"],
        set_={"tick": insert.excluded.tick, "at": insert.excluded.at},
        where=_p.c.tick < insert.excluded.tick,
    ).returning(_p.c.name)
    return conn.execute(stmt).first() is not None


def register_runner(conn: Connection) -> int:
    """Note a `frontdesk worker` process running jobs (SQLite); returns its id."""
    stmt = sa.insert(_w).values(heartbeat=time.time(), started_at=utcnow()).returning(_w.c.id)
    return int(conn.execute(stmt).scalar_one())


def beat(conn: Connection, runner_id: int) -> None:
    """A live runner's heartbeat (SQLite)."""
    conn.execute(sa.update(_w).where(_w.c.id == runner_id).values(heartbeat=time.time()))


def unregister_runner(conn: Connection, runner_id: int, *, stale_after: float) -> None:
    """A runner stopped (SQLite): its row goes, with those of runners dead for long."""
    old = time.time() - stale_after
    conn.execute(sa.delete(_w).where(sa.or_(_w.c.id == runner_id, _w.c.heartbeat < old)))


def runners_alive(conn: Connection, *, within: float) -> int:
    """How many job runners sent a heartbeat in the last `within` seconds: every
    Procrastinate worker on PostgreSQL (inline ones too), `frontdesk worker` processes on
    SQLite."""
    if _pg(conn):
        sql = (
            "SELECT count(*) FROM procrastinate_workers"
            " WHERE last_heartbeat > now() - make_interval(secs => :within)"
        )
        return int(conn.execute(sa.text(sql), {"within": within}).scalar_one())
    since = time.time() - within
    stmt = sa.select(sa.func.count()).select_from(_w).where(_w.c.heartbeat > since)
    return int(conn.execute(stmt).scalar_one())


class JobStore:
    """The job rows of the conversation database, for the runners and `frontdesk jobs`.

    Recording a job goes through `defer`, in the transaction of the row that causes it;
    everything else here is one short transaction of its own."""

    def __init__(self, engine: AsyncEngine) -> None:
        """`engine`: the conversation store's `AsyncEngine` (its database is at head)."""
        self.engine = engine

    @property
    def postgres(self) -> bool:
        """Whether the jobs are Procrastinate's (PostgreSQL) rather than the in-process
        runner's (SQLite)."""
        return self.engine.dialect.name == "postgresql"

    async def defer(self, specs: Sequence[JobSpec]) -> list[Deferred]:
        """Record `specs` in a transaction of their own (jobs caused by no stored row)."""
        return await run_sync_tx(self.engine, lambda conn: defer(conn, specs))

    async def list(self, *, failed_only: bool = False, limit: int = 500) -> list[JobRow]:
        """Pending, running and failed jobs (or failed ones only), oldest first."""
        chosen = statuses(failed_only)
        return await run_sync_tx(
            self.engine, lambda conn: list_jobs(conn, status=chosen, limit=limit), readonly=True
        )

    async def outstanding(
        self, ids: Sequence[int] | None = None, *, exclude: Sequence[str] = ()
    ) -> int:
        """How many jobs (of `ids`, or all but the kinds `exclude`) are to run or running."""
        return await run_sync_tx(
            self.engine, lambda conn: outstanding(conn, ids, exclude=exclude), readonly=True
        )

    async def retry(self, job_id: int) -> bool:
        """Run a failed or cancelled job again at once; `False` when it is neither."""
        return await run_sync_tx(self.engine, lambda conn: retry(conn, job_id))

    async def cancel(self, job_id: int) -> bool:
        """Cancel a job waiting to run; `False` when it is running or finished."""
        return await run_sync_tx(self.engine, lambda conn: cancel(conn, job_id))

    async def record_error(self, job_id: int, error: str) -> None:
        """Keep `error` as the job's last error."""
        await run_sync_tx(self.engine, lambda conn: record_error(conn, job_id, error))

    async def is_done(self, key: str) -> bool:
        """Whether the job with idempotency key `key` took effect."""
        return await run_sync_tx(self.engine, lambda conn: is_done(conn, key), readonly=True)

    async def mark_done(self, key: str) -> None:
        """Record that the job `key` took effect (when its effect has no transaction to
        share: prefer `mark_done(conn, key)` inside the effect's own)."""
        await run_sync_tx(self.engine, lambda conn: mark_done(conn, key))

    async def postpone(self, job_id: int, until: datetime) -> bool:
        """Push a waiting job's time to `until` (see `postpone`)."""
        return await run_sync_tx(self.engine, lambda conn: postpone(conn, job_id, until))

    async def claim_tick(self, name: str, tick: int) -> bool:
        """Whether this runner takes tick `tick` of the periodic job `name` (SQLite)."""
        return await run_sync_tx(self.engine, lambda conn: claim_tick(conn, name, tick))

    async def register_runner(self) -> int:
        """Note this process as a job runner (SQLite); its id, for `beat`."""
        return await run_sync_tx(self.engine, register_runner)

    async def beat(self, runner_id: int) -> None:
        """This runner is alive (SQLite)."""
        await run_sync_tx(self.engine, lambda conn: beat(conn, runner_id))

    async def unregister_runner(self, runner_id: int, *, stale_after: float) -> None:
        """This runner stopped (SQLite)."""
        await run_sync_tx(
            self.engine, lambda conn: unregister_runner(conn, runner_id, stale_after=stale_after)
        )

    async def runners_alive(self, *, within: float) -> int:
        """How many job runners sent a heartbeat in the last `within` seconds."""
        return await run_sync_tx(
            self.engine, lambda conn: runners_alive(conn, within=within), readonly=True
        )

    async def has_due(self) -> bool:
        """Whether a job may be claimed now (SQLite; a read, so an idle runner polls it
        without taking the write lock)."""
        return await run_sync_tx(self.engine, lambda conn: due(conn), readonly=True)

    async def claim(self, *, lease: float) -> JobRow | None:
        """Take the next job to run (SQLite, see `claim`)."""
        return await run_sync_tx(self.engine, lambda conn: claim(conn, lease=lease))

    async def renew(self, job_id: int, *, lease: float) -> None:
        """Extend a running job's lease (SQLite)."""
        await run_sync_tx(self.engine, lambda conn: renew(conn, job_id, lease=lease))

    async def finish(
        self,
        job_id: int,
        status: Literal["succeeded", "failed", "todo"],
        *,
        error: str | None = None,
        retry_in: float | None = None,
    ) -> None:
        """End a run (SQLite, see `finish`)."""
        await run_sync_tx(
            self.engine,
            lambda conn: finish(conn, job_id, status, error=error, retry_in=retry_in),
        )


def due(conn: Connection, now: float | None = None) -> bool:
    """Whether some job is runnable now (SQLite): due `todo`, or `doing` with a dead lease."""
    stamp = time.time() if now is None else now
    return _DUE.first(conn, {"now": utcnow(), "stamp": stamp}) is not None
