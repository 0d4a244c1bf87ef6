"""Durable background jobs: their kinds, and the engine that runs them (docs/jobs.md).

Everything that happens after a reply (learning from the user's message, compacting the
thread) is a job recorded in the reply's own write transaction (`threads.jobs.defer`);
time-based work (hand-off timeouts) is a periodic job derived from the stored rows. So a
process killed at any point after that commit loses nothing: the next runner finds it.

Two engines behind one `Jobs` object:
- PostgreSQL: Procrastinate. The rows are `procrastinate_jobs`; its workers fetch with
  `SKIP LOCKED`, run one lock's jobs one at a time in the order they were recorded, retry
  with this module's backoff, defer periodic jobs once across all workers, and stop
  gracefully on SIGTERM (a job still running after the grace period is given back, to be
  retried). `jobs="inline"` runs a worker inside the orchestrator's process;
  `jobs="worker"` leaves the jobs to `frontdesk worker` processes, on any host.
- SQLite (one machine): the same jobs, the same order and retries, run in process from
  the `job` table by `_LocalRunner`, which claims like Procrastinate's fetch does.

A kind is a `JobKind` (name, async handler of its JSON args, attempts, backoff); a
periodic job is a `PeriodicJob` (name, every N seconds, async handler). Both are listed
once, where the orchestrator builds its `Jobs` (docs/jobs.md, "Adding a job kind").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from frontdesk.errors import ConfigError
from frontdesk.threads.jobs import PERIODIC_QUEUE, QUEUE, Deferred, JobRow, JobStore

log = structlog.get_logger("frontdesk.jobs")

JobsMode = Literal["inline", "worker"]
JOBS_MODES: tuple[JobsMode, ...] = ("inline", "worker")

Handler = Callable[[Mapping[str, Any]], Awaitable[None]]
"""Runs one job from its JSON arguments; raising fails this attempt (retried per kind)."""

DEFAULT_CONCURRENCY = 4
"""Jobs one runner (inline, or one `frontdesk worker`) runs at once."""
LEASE = 5.0
"""Seconds a SQLite runner's claim lasts unless renewed (a dead runner's job is taken
over after this); a running job renews it every third of it."""
POLL = 0.25
"""Seconds an idle runner waits between looks for due jobs (woken early by its own
process's new jobs, and on PostgreSQL by Procrastinate's LISTEN/NOTIFY)."""
SHUTDOWN_GRACE = 10.0
"""Seconds a stopping runner lets its running jobs finish before giving them back."""
STALLED_AFTER = 5.0
"""Seconds without a heartbeat after which a Procrastinate worker counts as dead and its
running jobs are retried (by the periodic `jobs.recover_stalled`)."""
SETTLE_WAIT = 0.1
"""Seconds a turn waits, at most, for its user's memory jobs started in this process."""


@dataclass(frozen=True, kw_only=True)
class JobKind:
    """One kind of job: its name (the task name in the rows), handler and retry policy."""

    name: str
    run: Handler
    attempts: int = 3
    """Runs in all before the job ends `failed` (kept, listed by `frontdesk jobs`)."""
    backoff: float = 1.0
    """Seconds before the second run; each later one waits twice as long as the last."""
    timeout: float = 120.0
    """Seconds one run may take (a run past it fails, and is retried)."""

    def retry_in(self, runs: int) -> float | None:
        """Seconds before the next run after `runs` failed ones (`None`: failed for good)."""
        if runs >= self.attempts:
            return None
        return float(self.backoff * 2 ** (runs - 1))


@dataclass(frozen=True, kw_only=True)
class PeriodicJob:
    """Work run every `every` seconds by one runner (derived from stored rows, so a missed
    tick is caught up by the next)."""

    name: str
    every: int
    """Seconds between runs: a divisor of 60 below 60, or a multiple of 60 up to 3600."""
    run: Callable[[], Awaitable[None]]

    def cron(self) -> str:
        """The schedule as Procrastinate's cron (6 fields: seconds last)."""
        if self.every < 60:
            return f"* * * * * */{self.every}"
        return f"*/{self.every // 60} * * * *"


def _check_periodic(job: PeriodicJob) -> None:
    ok = (0 < job.every < 60 and 60 % job.every == 0) or (
        60 <= job.every <= 3600 and job.every % 60 == 0 and 60 % (job.every // 60) == 0
    )
    if not ok:
        raise ConfigError(
            f"periodic job {job.name!r}: every={job.every} s; use a divisor of 60 below 60"
            " (1, 2, 5, 10, ...) or whole minutes that divide an hour (60, 300, 600, ...)"
        )


def lock_key(prefix: str, value: str) -> str:
    """A job lock naming `value` by digest (a lock outlives an erasure; no user id in it)."""
    return f"{prefix}:{hashlib.sha256(value.encode()).hexdigest()[:24]}"


def error_text(error: BaseException) -> str:
    """A job's last error as kept and listed."""
    return f"{type(error).__name__}: {error}"


class DrainTimeout(TimeoutError):
    """`drain(timeout)` ran out with jobs still to run."""

    def __init__(self, left: int) -> None:
        super().__init__(f"{left} background job(s) still to run; see `frontdesk jobs`")
        self.left = left


@dataclass
class Jobs:
    """The orchestrator's background jobs: recorded with their rows, run by an engine.

    Args:
        store: The job rows (`threads.jobs.JobStore`) of the conversation database.
        mode: `inline` runs the jobs in this process; `worker` leaves them to
            `frontdesk worker` processes (PostgreSQL, or SQLite on this machine).
        conninfo: The libpq URL of the PostgreSQL database (Procrastinate's connection).
        kinds: The job kinds this runner knows.
        periodic: The periodic jobs.
        concurrency: Jobs run at once by this process's runner.
        grace: Seconds a stopping runner lets its running jobs finish before giving them
            back (to be retried).
    """

    store: JobStore
    mode: JobsMode = "inline"
    conninfo: str | None = None
    kinds: Sequence[JobKind] = ()
    periodic: Sequence[PeriodicJob] = ()
    concurrency: int = DEFAULT_CONCURRENCY
    grace: float = SHUTDOWN_GRACE
    _runner: _LocalRunner | _ProcrastinateRunner | None = None
    _deferred: set[int] = field(default_factory=set)
    _by_lock: dict[str, set[int]] = field(default_factory=dict)
    _settled: dict[str, asyncio.Event] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in JOBS_MODES:
            raise ConfigError(f"jobs must be 'inline' or 'worker', got {self.mode!r}")
        if self.concurrency < 1:
            raise ConfigError(f"job concurrency must be >= 1, got {self.concurrency}")
        names = [k.name for k in self.kinds] + [p.name for p in self.periodic]
        if len(set(names)) != len(names):
            raise ConfigError(f"job kinds and periodic jobs need distinct names: {names}")
        for job in self.periodic:
            _check_periodic(job)
        if self.store.postgres and self.conninfo is None:
            raise ConfigError("jobs on PostgreSQL need the database's URL (conninfo)")

    # -- recording ------------------------------------------------------------------------

    def recorded(self, jobs: Sequence[Deferred]) -> None:
        """Note jobs this process recorded (committed): `drain` waits for them, a turn's
        `settle` for its user's, and this process's idle runner looks at once."""
        for job in jobs:
            self._deferred.add(job.id)
            if job.lock is not None:
                self._by_lock.setdefault(job.lock, set()).add(job.id)
                self._settled.setdefault(job.lock, asyncio.Event())
        if self._runner is not None:
            self._runner.wake()

    def _ended(self, job_id: int, lock: str | None) -> None:
        self._deferred.discard(job_id)
        if lock is not None and (pending := self._by_lock.get(lock)) is not None:
            pending.discard(job_id)
            if not pending:
                del self._by_lock[lock]
                if (settled := self._settled.pop(lock, None)) is not None:
                    settled.set()

    async def settle(self, lock: str, within: float = SETTLE_WAIT) -> None:
        """Wait, at most `within` seconds, for the jobs of `lock` this process recorded and
        runs (so a fact said in one turn is usually known in the next)."""
        settled = self._settled.get(lock) if self.mode == "inline" else None
        if settled is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(settled.wait(), within)

    # -- running --------------------------------------------------------------------------

    async def start(self) -> None:
        """Start this process's runner (`inline`); nothing in `worker` mode."""
        if self.mode == "inline" and self._runner is None:
            self._runner = self._make_runner()
            await self._runner.start()

    def _make_runner(self) -> _LocalRunner | _ProcrastinateRunner:
        if self.store.postgres:
            assert self.conninfo is not None
            return _ProcrastinateRunner(self, self.conninfo)
        return _LocalRunner(self)

    async def run_worker(self, *, handle_signals: bool = True) -> None:
        """Run jobs in the foreground until SIGTERM or SIGINT (`frontdesk worker`): stop
        fetching, let running jobs finish for `grace` seconds, give back the rest."""
        runner = self._make_runner()
        self._runner = runner
        await runner.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            if handle_signals:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
            await runner.stop()
            self._runner = None

    async def drain(
        self,
        timeout: float | None = None,  # noqa: ASYNC109 (the public name of Orchestrator.drain)
        *,
        mine: bool = False,
    ) -> None:
        """Wait until the background work is done: in `inline` mode every job of the
        database but the periodic ones (the jobs found at start included), in `worker`
        mode (or with `mine`) the jobs this process recorded.

        Raises:
            DrainTimeout: `timeout` seconds passed with jobs left (`.left` says how many).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        periodic = [p.name for p in self.periodic]
        while True:
            if self.mode == "inline" and not mine:
                left = await self.store.outstanding(exclude=periodic)
                if self._runner is not None:
                    left += self._runner.busy()
            else:
                left = await self.store.outstanding(list(self._deferred)) if self._deferred else 0
            if left == 0:
                self._deferred.clear()
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise DrainTimeout(left)
            await asyncio.sleep(0.02)

    async def aclose(self) -> None:
        """Stop this process's runner (a running job gets `grace` seconds)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.stop()

    # -- one run ----------------------------------------------------------------------------

    def kind(self, name: str) -> JobKind | None:
        """The registered kind `name`, if any."""
        return next((k for k in self.kinds if k.name == name), None)

    async def list(self, *, failed_only: bool = False) -> list[JobRow]:
        """Pending, running and failed jobs (`frontdesk jobs`)."""
        return await self.store.list(failed_only=failed_only)


# -- SQLite: the in-process runner -----------------------------------------------------


class _LocalRunner:
    """Runs the `job` table's jobs in this process (SQLite): claims like Procrastinate."""

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs
        self._wake = asyncio.Event()
        self._stopping = False
        self._slots = asyncio.Semaphore(jobs.concurrency)
        self._running: dict[asyncio.Task[None], JobRow] = {}
        self._loops: list[asyncio.Task[None]] = []

    def wake(self) -> None:
        self._wake.set()

    def busy(self) -> int:
        return len(self._running)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._loops = [loop.create_task(self._fetch_loop(), name="frontdesk jobs")]
        self._loops += [
            loop.create_task(self._periodic_loop(p), name=f"frontdesk periodic {p.name}")
            for p in self.jobs.periodic
        ]

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        if self._running:
            _done, late = await asyncio.wait(list(self._running), timeout=self.jobs.grace)
            for task in late:  # Given back (`todo`) by `_run` as it is cancelled.
                task.cancel()
            if late:
                await asyncio.gather(*late, return_exceptions=True)

    async def _fetch_loop(self) -> None:
        while not self._stopping:
            await self._slots.acquire()
            # Cleared before the look, never after: a job recorded while we look wakes
            # the wait below at once (cleared after, it would wait a whole poll).
            self._wake.clear()
            try:
                job = await self._next()
            except Exception as e:  # The database is away: look again later.
                log.warning("jobs.fetch_failed", error=type(e).__name__)
                job = None
            if job is None:
                self._slots.release()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), POLL)
                continue
            task = asyncio.get_running_loop().create_task(self._run(job))
            self._running[task] = job
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)
        self._slots.release()
        self._wake.set()  # A job of its lock may wait behind it: look now, not next poll.

    async def _next(self) -> JobRow | None:
        if not await self.jobs.store.has_due():  # A read: an idle poll takes no write lock.
            return None
        return await self.jobs.store.claim(lease=LEASE)

    async def _run(self, job: JobRow) -> None:
        store, kind = self.jobs.store, self.jobs.kind(job.kind)
        renewing = asyncio.get_running_loop().create_task(self._renew(job.id))
        try:
            if kind is None:
                raise LookupError(f"no job kind {job.kind!r} is registered in this process")
            await asyncio.wait_for(kind.run(job.args), kind.timeout)
        except asyncio.CancelledError:  # Shutdown: give the job back, at once, unharmed.
            renewing.cancel()
            with contextlib.suppress(Exception):
                await asyncio.shield(store.finish(job.id, "todo", retry_in=0.0))
            raise
        except Exception as e:
            renewing.cancel()
            delay = None if kind is None else kind.retry_in(job.attempts)
            log.warning(
                "jobs.failed", kind=job.kind, job_id=job.id, attempt=job.attempts, retry_in=delay
            )
            status: Literal["todo", "failed"] = "failed" if delay is None else "todo"
            await store.finish(job.id, status, error=error_text(e), retry_in=delay)
        else:
            renewing.cancel()
            await store.finish(job.id, "succeeded")
        finally:
            self.jobs._ended(job.id, job.lock)

    async def _renew(self, job_id: int) -> None:
        while True:
            await asyncio.sleep(LEASE / 3)
            with contextlib.suppress(Exception):
                await self.jobs.store.renew(job_id, lease=LEASE)

    async def _periodic_loop(self, job: PeriodicJob) -> None:
        while not self._stopping:
            try:
                await job.run()
            except Exception as e:  # Derived from rows: the next tick tries again.
                log.warning("jobs.periodic_failed", job=job.name, error=type(e).__name__)
            await asyncio.sleep(job.every)


# -- PostgreSQL: Procrastinate ---------------------------------------------------------


def _procrastinate() -> Any:
    try:
        import procrastinate
    except ImportError as e:
        raise ConfigError(
            "jobs on PostgreSQL run on Procrastinate, which is not installed; install the"
            " extra: pip install 'frontdesk[jobs]'"
        ) from e
    return procrastinate


class _ProcrastinateRunner:
    """A Procrastinate worker in this process, with every kind registered as a task."""

    def __init__(self, jobs: Jobs, conninfo: str) -> None:
        self.jobs = jobs
        pc = _procrastinate()
        self.app = pc.App(
            connector=pc.PsycopgConnector(
                conninfo=conninfo, min_size=1, max_size=max(4, jobs.concurrency + 2)
            )
        )
        self._running = 0
        self._task: asyncio.Task[None] | None = None
        for kind in jobs.kinds:
            self.app.task(
                name=kind.name, queue=QUEUE, pass_context=True, retry=_retry_strategy(pc, kind)
            )(self._task_of(kind))
        periodic = [*jobs.periodic, self._recover_stalled()]
        for job in periodic:
            task = self.app.task(name=job.name, queue=PERIODIC_QUEUE, pass_context=False)(
                self._periodic_of(job)
            )
            self.app.periodic(cron=job.cron(), periodic_id=job.name)(task)

    def wake(self) -> None:
        """Procrastinate's LISTEN/NOTIFY wakes its worker on each new job."""

    def busy(self) -> int:
        return self._running

    def _task_of(self, kind: JobKind) -> Callable[..., Awaitable[None]]:
        async def run(context: Any, **args: Any) -> None:
            job = context.job
            self._running += 1
            try:
                await asyncio.wait_for(kind.run(args), kind.timeout)
            except Exception as e:
                runs = int(job.attempts) + 1
                log.warning("jobs.failed", kind=kind.name, job_id=job.id, attempt=runs)
                with contextlib.suppress(Exception):
                    await self.jobs.store.record_error(int(job.id), error_text(e))
                raise
            finally:
                self._running -= 1
                self.jobs._ended(int(job.id), job.lock)

        run.__name__ = kind.name.replace(".", "_")
        return run

    def _periodic_of(self, job: PeriodicJob) -> Callable[..., Awaitable[None]]:
        async def run(timestamp: int) -> None:
            try:
                await job.run()
            except Exception as e:  # Derived from rows: the next tick tries again.
                log.warning("jobs.periodic_failed", job=job.name, error=type(e).__name__)

        run.__name__ = job.name.replace(".", "_")
        return run

    def _recover_stalled(self) -> PeriodicJob:
        manager = self.app.job_manager

        async def recover() -> None:
            """Retry the running jobs of workers that died (no heartbeat): SIGKILL, a lost
            host. Procrastinate leaves such jobs `doing`; this gives them back."""
            stalled = [
                job
                for queue in (QUEUE, PERIODIC_QUEUE)
                for job in await manager.get_stalled_jobs(
                    queue=queue, seconds_since_heartbeat=STALLED_AFTER
                )
            ]
            for job in stalled:
                log.warning("jobs.stalled_retried", job_id=job.id, kind=job.task_name)
                await manager.retry_job(job)

        return PeriodicJob(name="jobs.recover_stalled", every=2, run=recover)

    async def start(self) -> None:
        await self.app.open_async()
        self._task = asyncio.get_running_loop().create_task(
            self.app.run_worker_async(
                queues=[QUEUE, PERIODIC_QUEUE],
                concurrency=self.jobs.concurrency,
                install_signal_handlers=False,
                delete_jobs="successful",
                shutdown_graceful_timeout=self.jobs.grace,
                update_heartbeat_interval=STALLED_AFTER / 3,
                stalled_worker_timeout=STALLED_AFTER,
                fetch_job_polling_interval=POLL * 4,
            ),
            name="frontdesk procrastinate worker",
        )

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.app.close_async()


def _retry_strategy(pc: Any, kind: JobKind) -> Any:
    """`kind`'s retry policy as a Procrastinate strategy (a run cut by a worker's shutdown
    is always given back, at once)."""

    class Retry(pc.BaseRetryStrategy):  # type: ignore[misc]
        def get_retry_decision(self, *, exception: BaseException, job: Any) -> Any:
            if isinstance(exception, asyncio.CancelledError | pc.exceptions.JobAborted):
                return pc.RetryDecision(retry_in={"seconds": 0})
            delay = kind.retry_in(int(job.attempts) + 1)
            if delay is None:
                return None
            return pc.RetryDecision(retry_in={"seconds": delay})

    return Retry()
