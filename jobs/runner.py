"""Durable background jobs: their kinds, and the engine that runs them (docs/jobs.md).

Everything that happens after a reply (learning from the user's message, compacting the
thread) is a job recorded in the reply's own write transaction (`jobs.store.defer`);
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

Each run of a job is a `frontdesk.job {kind}` span and counts in `frontdesk_job_runs`
(`frontdesk.telemetry.job`): kind, key, attempt and outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from frontdesk import telemetry
from frontdesk.errors import ConfigError
from frontdesk.jobs.store import PERIODIC_QUEUE, QUEUE, Deferred, JobRow, JobStore

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
IDLE_POLL = 5.0
"""Seconds an idle inline runner on SQLite backs off to between looks (its own process's
jobs and retries wake it at once; the looks find what dead processes left, whose leases
ran out). A `frontdesk worker` keeps looking every `POLL`."""
SHUTDOWN_GRACE = 10.0
"""Seconds a stopping runner lets its running jobs finish before giving them back."""
STALLED_AFTER = 5.0
"""Seconds without a heartbeat after which a Procrastinate worker counts as dead and its
running jobs are retried (by the periodic `jobs.recover_stalled`)."""
SETTLE_WAIT = 0.1
"""Seconds a turn waits, at most, for its user's memory jobs started in this process."""
SETTLE_LOOK = 0.02
"""Seconds a settling turn waits for this process's runner before it reads the job rows
(the jobs may have run in another process)."""
YIELD_WAIT = 0.5
"""Seconds, at most, this process's runner (SQLite) waits for the turns in flight here to
end before it starts a job: background work goes between turns, not inside them (under a
constant stream of turns a job still starts after this wait)."""
RUNNER_ALIVE = STALLED_AFTER
"""Seconds since its last heartbeat within which a runner counts as alive (a wait for work
another process owns gives up at once when no runner is)."""
HEARTBEAT = LEASE / 3
"""Seconds between a `frontdesk worker`'s heartbeats on SQLite (`job_worker`)."""


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
    yields: bool = False
    """Wait for a moment between this process's turns (at most `YIELD_WAIT`) before each
    run: work another conversation's next turn should not queue behind (the memory
    expert). Compaction does not yield: a late summary makes every later turn read more."""

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
    """Seconds between runs: a divisor of 60 below 60, whole minutes that divide an hour,
    or whole hours that divide a day (3600, 7200, ..., 86400)."""
    run: Callable[[], Awaitable[None]]
    exclusive: bool = False
    """Run once per period across every runner and process (PostgreSQL: Procrastinate's
    periodic defers always are; SQLite: the runner that claims the period's tick in
    `job_periodic`). Without it, each SQLite runner runs its own ticks (a sweep that is
    cheap and safe to run twice, like the hand-off timeouts)."""
    traced: bool = False
    """A `frontdesk.job` span per run (a sweep every second would be a span a second:
    such runs are counted, not traced)."""

    def __post_init__(self) -> None:
        _check_periodic(self)

    def cron(self) -> str:
        """The schedule as Procrastinate's cron (6 fields: seconds last)."""
        if self.every < 60:
            return f"* * * * * */{self.every}"
        if self.every < 3600:
            return f"*/{self.every // 60} * * * *"
        return f"0 */{self.every // 3600} * * *" if self.every < 86400 else "0 0 * * *"


def _check_periodic(job: PeriodicJob) -> None:
    every = job.every
    ok = (
        (0 < every < 60 and 60 % every == 0)
        or (60 <= every <= 3600 and every % 60 == 0 and 60 % (every // 60) == 0)
        or (3600 <= every <= 86400 and every % 3600 == 0 and 24 % (every // 3600) == 0)
    )
    if not ok:
        raise ConfigError(
            f"periodic job {job.name!r}: every={every} s; use a divisor of 60 below 60"
            " (1, 2, 5, 10, ...), whole minutes that divide an hour (60, 300, 600, ...) or"
            " whole hours that divide a day (3600, 21600, 86400)"
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
        store: The job rows (`jobs.store.JobStore`) of the conversation database.
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
    _kinds: dict[int, str] = field(default_factory=dict)
    _by_lock: dict[str, set[int]] = field(default_factory=dict)
    _settled: dict[str, asyncio.Event] = field(default_factory=dict)
    _foreground: int = 0
    _settling: int = 0
    _quiet: asyncio.Event = field(default_factory=asyncio.Event)

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
            self._kinds[job.id] = job.kind
            if job.lock is not None:
                self._by_lock.setdefault(job.lock, set()).add(job.id)
                self._settled.setdefault(job.lock, asyncio.Event())
        if self._runner is not None:
            self._runner.wake(recorded=True)

    def _lock_of(self, job_id: int) -> str | None:
        return next((lock for lock, ids in self._by_lock.items() if job_id in ids), None)

    def _ended(self, job_id: int, lock: str | None) -> None:
        self._deferred.discard(job_id)
        self._kinds.pop(job_id, None)
        if lock is not None and (pending := self._by_lock.get(lock)) is not None:
            pending.discard(job_id)
            if not pending:
                del self._by_lock[lock]
                if (settled := self._settled.pop(lock, None)) is not None:
                    settled.set()

    @contextlib.contextmanager
    def foreground(self) -> Iterator[None]:
        """Mark a turn in flight in this process while the block runs: this process's
        runner starts no yielding job meanwhile (for at most `YIELD_WAIT`), so the memory
        expert of one conversation does not queue another conversation's turn behind its
        writes (benchmarks.memory_gate measures it)."""
        self._foreground += 1
        self._quiet.clear()
        try:
            yield
        finally:
            self._foreground -= 1
            self._calm()

    def _calm(self) -> None:
        if self._foreground <= self._settling:  # Every turn here waits for jobs, or none runs.
            self._quiet.set()

    async def quiet(self, within: float = YIELD_WAIT) -> None:
        """Wait, at most `within` seconds, until no turn is in flight here (a turn waiting
        for its user's jobs in `settle` does not count: it waits for them)."""
        deadline = time.monotonic() + within
        # Checked again on waking: a turn that started in the same loop tick as the last
        # one ended counts (the event was set, and cleared, before this task ran).
        while self._foreground > self._settling:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._quiet.wait(), left)

    @property
    def unsettled(self) -> bool:
        """Whether some job this process recorded may still hold a turn back (`settle`):
        when none does, a turn need not even name its user's lock."""
        return self.mode == "inline" and bool(self._settled)

    async def settle(self, lock: str, within: float = SETTLE_WAIT) -> None:
        """Wait, at most `within` seconds, for the jobs of `lock` this process recorded (so
        a fact said in one turn is usually known in the next).

        This process's runner ends the wait when it runs them; another process's runner
        (several processes on one database) does not tell us, so after `SETTLE_LOOK` the
        job rows are read: without that look, every later turn of the user would wait the
        whole `within` for jobs that are long done."""
        settled = self._settled.get(lock) if self.mode == "inline" else None
        if settled is None or settled.is_set():
            return
        self._settling += 1
        self._calm()
        try:
            await self._settle(lock, settled, within)
        finally:
            self._settling -= 1
            if self._foreground > self._settling:
                self._quiet.clear()

    async def _settle(self, lock: str, settled: asyncio.Event, within: float) -> None:
        deadline = time.monotonic() + within
        while not settled.is_set():
            left = deadline - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(settled.wait(), min(SETTLE_LOOK, max(left, 0.0)))
                return
            pending = list(self._by_lock.get(lock, ()))
            if not pending or await self.store.outstanding(pending) == 0:
                for job_id in pending:  # Run elsewhere: forget them as this runner would.
                    self._ended(job_id, lock)
                return
            if time.monotonic() >= deadline:
                return

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
        if isinstance(runner, _LocalRunner):
            runner.announce = True  # Others' waits see a worker alive (`runners_alive`).
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
        if (self.mode == "worker" or mine) and self._deferred and self._runner is None:
            await self._warn_without_runner()
        while True:
            if self.mode == "inline" and not mine:
                left = await self.store.outstanding(exclude=periodic)
                if self._runner is not None:
                    left += self._runner.busy()
            else:
                left = await self.store.outstanding(list(self._deferred)) if self._deferred else 0
            if left == 0:
                self._deferred.clear()
                self._kinds.clear()
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise DrainTimeout(left)
            await asyncio.sleep(0.02)

    async def wait(self, kinds: Sequence[str], within: float) -> int:
        """Wait, at most `within` seconds, for the jobs of `kinds` this process recorded;
        how many are left (0: all done). They are looked up in the job rows, so work that
        another process runs (`jobs="worker"`) is seen done as soon as it is. When this
        process runs no jobs and no runner is alive (no `frontdesk worker`, or on
        PostgreSQL no Procrastinate worker, sent a heartbeat lately), it returns at once,
        logging `jobs.no_runner`: nobody would run them while it waited.
        """
        deadline = time.monotonic() + within
        checked = 0.0
        while True:
            ids = [i for i, kind in self._kinds.items() if kind in kinds and i in self._deferred]
            left = await self.store.outstanding(ids) if ids else 0
            if left == 0:
                for i in ids:
                    self._ended(i, self._lock_of(i))
                return 0
            now = time.monotonic()
            if self._runner is None and now - checked >= 1.0:
                checked = now
                if not await self._warn_without_runner():
                    return left
            if now >= deadline:
                return left
            await asyncio.sleep(0.05)

    async def _warn_without_runner(self) -> bool:
        """Whether some runner is alive; when none is, say so (`jobs.no_runner`)."""
        alive = await self.store.runners_alive(within=RUNNER_ALIVE)
        if not alive:
            log.warning(
                "jobs.no_runner",
                jobs=len(self._deferred),
                hint="start `frontdesk worker`, or use jobs='inline'",
            )
        return alive > 0

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
        self.announce = False
        """Register in `job_worker` and send heartbeats (a `frontdesk worker` process)."""
        self._runner_id: int | None = None
        self._recorded = False
        """This process committed a job since the last look: claim without reading first."""

    def wake(self, *, recorded: bool = False) -> None:
        """Look now. `recorded`: this process has just committed a job, so the look is a
        claim at once, without the read of whether anything is due (on SQLite that read
        crosses to the async driver's thread: it cost a memory turn more than the claim)."""
        self._recorded = self._recorded or recorded
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
        if self.announce:
            self._runner_id = await self.jobs.store.register_runner()
            self._loops.append(loop.create_task(self._heartbeat(), name="frontdesk heartbeat"))

    async def _heartbeat(self) -> None:
        assert self._runner_id is not None
        while True:
            await asyncio.sleep(HEARTBEAT)
            with contextlib.suppress(Exception):
                await self.jobs.store.beat(self._runner_id)

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        if self._runner_id is not None:
            with contextlib.suppress(Exception):
                await self.jobs.store.unregister_runner(self._runner_id, stale_after=3600.0)
            self._runner_id = None
        if self._running:
            _done, late = await asyncio.wait(list(self._running), timeout=self.jobs.grace)
            for task in late:  # Given back (`todo`) by `_run` as it is cancelled.
                task.cancel()
            if late:
                await asyncio.gather(*late, return_exceptions=True)

    async def _fetch_loop(self) -> None:
        idle = POLL
        # A `frontdesk worker` runs what other processes record: it looks every `POLL`. An
        # inline runner is woken by its own process's jobs (and their retries), so while
        # idle it backs off to `IDLE_POLL`, looking only for what dead processes left.
        longest = POLL if self.announce else IDLE_POLL
        while not self._stopping:
            await self._slots.acquire()
            self._wake.clear()  # Before the look: a job recorded meanwhile still wakes it.
            try:
                job = await self._next()
            except Exception as e:  # The database is away: look again later.
                log.warning("jobs.fetch_failed", error=type(e).__name__)
                job = None
            if job is None:
                self._slots.release()
                try:
                    await asyncio.wait_for(self._wake.wait(), idle)
                    idle = POLL
                except TimeoutError:
                    idle = min(idle * 2, longest)
                continue
            idle = POLL
            task = asyncio.get_running_loop().create_task(self._run(job))
            self._running[task] = job
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)
        self._slots.release()
        self._wake.set()  # A job of its lock may wait behind it: look now, not next poll.

    async def _next(self) -> JobRow | None:
        recorded, self._recorded = self._recorded, False
        # Otherwise a read first: an idle poll, or a look after a job ended, takes no write lock.
        if not recorded and not await self.jobs.store.has_due():
            return None
        return await self.jobs.store.claim(lease=LEASE)

    async def _run(self, job: JobRow) -> None:
        store, kind = self.jobs.store, self.jobs.kind(job.kind)
        renewing = asyncio.get_running_loop().create_task(self._renew(job.id))
        with telemetry.job(job.kind, job_id=job.id, key=job.lock, attempt=job.attempts) as span:
            try:
                if kind is None:
                    raise LookupError(f"no job kind {job.kind!r} is registered in this process")
                if kind.yields:  # Between this process's turns, not inside them.
                    await self.jobs.quiet()
                await asyncio.wait_for(kind.run(job.args), kind.timeout)
            except asyncio.CancelledError:  # Shutdown: give the job back, at once, unharmed.
                renewing.cancel()
                span.outcome = "given_back"
                with contextlib.suppress(Exception):
                    await asyncio.shield(store.finish(job.id, "todo", retry_in=0.0))
                raise
            except Exception as e:
                renewing.cancel()
                delay = None if kind is None else kind.retry_in(job.attempts)
                log.warning(
                    "jobs.failed",
                    kind=job.kind,
                    job_id=job.id,
                    attempt=job.attempts,
                    retry_in=delay,
                )
                status: Literal["todo", "failed"] = "failed" if delay is None else "todo"
                span.failed(e, outcome=status_outcome(status))
                await store.finish(job.id, status, error=error_text(e), retry_in=delay)
                if delay is not None:  # Look again when the retry is due.
                    asyncio.get_running_loop().call_later(delay, self.wake)
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
            if not job.exclusive:
                await run_periodic(job)
                await asyncio.sleep(job.every)
                continue
            tick = int(time.time() // job.every)  # One runner per period, in any process.
            try:
                mine = await self.jobs.store.claim_tick(job.name, tick)
            except Exception as e:  # The database is away: the next tick tries again.
                log.warning("jobs.periodic_failed", job=job.name, error=type(e).__name__)
                mine = False
            if mine:
                await run_periodic(job)
            await asyncio.sleep(max(0.05, (tick + 1) * job.every - time.time()))


async def run_periodic(job: PeriodicJob) -> None:
    """One run of a periodic job: counted (and traced when `job.traced`); a failure is
    logged, and the next tick tries again (the work is derived from rows)."""
    with telemetry.job(job.name, job_id=None, key=None, attempt=1, traced=job.traced) as span:
        try:
            await job.run()
        except Exception as e:
            log.warning("jobs.periodic_failed", job=job.name, error=type(e).__name__)
            span.failed(e, outcome="failed")


def status_outcome(status: Literal["todo", "failed"]) -> str:
    """A failed run's outcome: `retried` (it runs again later) or `failed` (for good)."""
    return "retried" if status == "todo" else "failed"


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

    def wake(self, *, recorded: bool = False) -> None:
        """Procrastinate's LISTEN/NOTIFY wakes its worker on each new job."""

    def busy(self) -> int:
        return self._running

    def _task_of(self, kind: JobKind) -> Callable[..., Awaitable[None]]:
        async def run(context: Any, **args: Any) -> None:
            job = context.job
            runs = int(job.attempts) + 1
            self._running += 1
            with telemetry.job(kind.name, job_id=int(job.id), key=job.lock, attempt=runs) as span:
                try:
                    await asyncio.wait_for(kind.run(args), kind.timeout)
                except asyncio.CancelledError:  # Shutdown: the retry strategy gives it back.
                    span.outcome = "given_back"
                    raise
                except Exception as e:
                    log.warning("jobs.failed", kind=kind.name, job_id=job.id, attempt=runs)
                    again = kind.retry_in(runs) is not None
                    span.failed(e, outcome="retried" if again else "failed")
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
            await run_periodic(job)  # Derived from rows: a failed tick is the next one's.

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
