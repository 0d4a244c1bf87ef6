"""Erasure of a user on request, and retention: every step in one list, each idempotent.

`erase_user` runs `STORE_STEPS` on the conversation database (one transaction per step,
each leaving nothing half-done), then the audit steps: destroy the user's data keys
(crypto-shredding: their audit payloads become unreadable, the rows and the chain stay),
append an `erased` event in the user's chain `audit.chains.user_chain_id(user_id)`, and
on SQLite rewrite the files (`VACUUM`, WAL checkpoint) so no old page keeps a copy.
A crash anywhere is finished by running it again: each step skips what is done already.

What outlives the user names them by a ref (`frontdesk.audit.refs`): the conversations'
owner `erased:<ref>`, their chain, their data keys' and memory jobs' names. With a master
key the ref is keyed (nobody can test a guessed id against it); records older versions
filed under the plain digest are found by it too and re-filed under the ref.

`request_erasure` (what `Orchestrator.erase_user` and `frontdesk erase` call) first records
the request and its `privacy.erase` job in one transaction, then erases in the caller,
keeping the job from coming due meanwhile; a caller that dies leaves the job due, and the
job runner (inline or `frontdesk worker`) finishes the erasure (docs/jobs.md).

Retention (`apply_retention`) runs from cron, or as the periodic job `privacy.retention`
when the orchestrator is given a `RetentionPolicy` (`Orchestrator(retention=...)`).

To erase another kind of record, append a `Step` to `STORE_STEPS` (its name is a field of
`ErasureReport`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import structlog

from frontdesk._driver.scrub import secure_delete, sqlite_path, vacuum
from frontdesk.audit import crypto
from frontdesk.audit import erasure as audit_erasure
from frontdesk.audit.chains import user_chain_id
from frontdesk.audit.events import AuditEvent
from frontdesk.audit.refs import UNKEYED, JobLockPurpose, UserRefs, legacy
from frontdesk.audit.store import AuditLog
from frontdesk.db import AsyncEngine, Connection, run_write
from frontdesk.errors import ConfigError
from frontdesk.jobs import store as job_rows
from frontdesk.jobs.runner import JobKind, PeriodicJob
from frontdesk.jobs.store import JobSpec, rename_lock
from frontdesk.orchestrator.ruled_values import Secrets
from frontdesk.ruled import RuledValues
from frontdesk.threads import erasure as store_erasure
from frontdesk.threads.listing import list_conversations
from frontdesk.threads.memory import MemoryStore
from frontdesk.threads.models import utcnow
from frontdesk.threads.ruled_values import erase_ruled_values
from frontdesk.threads.store import ConversationStore

log = structlog.get_logger("frontdesk.erasure")

ERASED_OWNER_PREFIX = "erased:"
RETENTION_CHAIN = "retention"
"""The audit chain of retention runs (no conversation, no user)."""
ERASE = "privacy.erase"
"""The job kind that finishes a recorded erasure request."""
ERASE_LEASE = 6.0
"""Seconds an erasure's job waits while its caller erases (pushed back every third of it):
a caller that died leaves it due this long after, to the job runner."""
RETENTION = "privacy.retention"
"""The periodic job that applies a `RetentionPolicy`."""
RETENTION_EVERY = 3600
"""Seconds between retention runs by default (its shredding is by month: hourly is ample)."""


@dataclass(frozen=True)
class ErasureReport:
    """What `Orchestrator.erase_user` changed, per kind of record (a re-run counts 0s)."""

    conversations: int = 0
    """Conversations of the user (their owner is now their ref, `erased:<ref>`, their metadata
    emptied; a re-run counts those an older version erased under a plain digest)."""
    messages: int = 0
    """Transcript messages whose content became the erased marker."""
    summaries: int = 0
    outcomes: int = 0
    """Stored turn outcomes (request, instruction, handler data) erased."""
    memories: int = 0
    handler_state: int = 0
    """User-scoped handler values deleted, plus conversation-scoped values erased."""
    handoffs: int = 0
    """Hand-off reasons erased."""
    ruled_values: int = 0
    """Kept digests of the user's ruled request values (`Redact`) deleted."""
    feedback: int = 0
    """Ratings whose comment was erased (the rating itself stays, for the reports)."""
    audit_keys: int = 0
    """Data keys destroyed: every audit payload under them is unreadable for good."""
    audit_rows_in_clear: int = 0
    """Audit rows of the user's conversations written without a master key: they stay
    readable (the chain forbids changing them); see docs/privacy.md."""

    def counts(self) -> dict[str, int]:
        """The counts by field name."""
        return {f.name: int(getattr(self, f.name)) for f in dataclasses.fields(self)}


@dataclass(frozen=True)
class RetentionReport:
    """What `apply_retention` shredded (or, with `dry_run`, would)."""

    cutoff: datetime
    periods_before: str
    """Data keys of months before this one ("YYYY-MM") are destroyed."""
    audit_keys: int = 0
    messages: int = 0
    summaries: int = 0
    outcomes: int = 0
    dry_run: bool = False
    feedback: int = 0
    """Ratings' comments (the ratings stay)."""

    def counts(self) -> dict[str, int]:
        """The counts by kind."""
        return {
            "audit_keys": self.audit_keys,
            "messages": self.messages,
            "summaries": self.summaries,
            "outcomes": self.outcomes,
            "feedback": self.feedback,
        }


def erased_owner(user_id: str, refs: UserRefs = UNKEYED) -> str:
    """What an erased conversation's `user_id` becomes: the user's ref, keyed when `refs`
    are (`AuditLog.refs` with a master key), so no id in clear and none to guess."""
    return ERASED_OWNER_PREFIX + refs.ref("erased_owner", user_id)


def legacy_erased_owner(user_id: str) -> str:
    """The erased owner versions before revision 0018 wrote (a plain digest): an erasure
    still finds conversations disowned so, and gives them the keyed owner."""
    return ERASED_OWNER_PREFIX + legacy(user_id)


StepWork = Callable[[Connection, Sequence[str], str], int]


@dataclass(frozen=True)
class Step:
    """One erasure step on the conversation database: `work(conn, conversation_ids,
    user_id)` returns how many records it erased. It runs even when the user has no
    conversation (a fact remembered by the application, say)."""

    field: str
    work: StepWork


STORE_STEPS: list[Step] = [
    Step("messages", store_erasure.erase_messages),
    Step("summaries", store_erasure.erase_summaries),
    Step("outcomes", store_erasure.erase_outcomes),
    Step("memories", store_erasure.erase_memories),
    Step("handler_state", store_erasure.erase_handler_state),
    Step("handoffs", store_erasure.erase_handoffs),
    Step("ruled_values", erase_ruled_values),
    Step("feedback", store_erasure.erase_feedback),
]
"""The erasure steps on the conversation database, in order; the conversations' own rows
are taken last (`threads.erasure.disown_conversations`), so a re-run after a crash still
finds them. The SQL of each is in the layer that owns the table (`threads.erasure`)."""


_secure = secure_delete


async def erase_user(
    engine: AsyncEngine,
    audit: AuditLog | None,
    user_id: str,
    *,
    requested_by: str | None = None,
    after_step: Callable[[str], None] | None = None,
    before_scrub: Callable[[ErasureReport], Awaitable[None]] | None = None,
) -> ErasureReport:
    """Erase everything stored about `user_id` (see the module docstring for the steps).

    Args:
        engine: The conversation database.
        audit: The audit log (`None` when auditing is off).
        user_id: The user to erase.
        requested_by: Who asked (recorded in the `erased` event; no personal data, please).
        after_step: Called with each step's name once it is committed (tests kill there).
        before_scrub: Awaited with the report before the files are rewritten (the request
            row forgets the user id there, so no old page keeps it).
    """
    counts: dict[str, int] = {}
    refs = UNKEYED if audit is None else audit.refs
    owner, old_owner = erased_owner(user_id, refs), legacy_erased_owner(user_id)
    owners = list(dict.fromkeys([user_id, owner, old_owner]))
    ids = await _read(engine, lambda c: store_erasure.conversation_ids(c, owners))
    for step in STORE_STEPS:

        def work(conn: Connection, step: Step = step) -> int:
            _secure(conn)
            return step.work(conn, ids, user_id)

        counts[step.field] = await run_write(engine, work)
        _tick(after_step, step.field)
    if audit is not None:
        counts["audit_rows_in_clear"] = await _read(
            audit.engine, lambda c: audit_erasure.rows_in_clear(c, ids)
        )

        def destroy(conn: Connection) -> int:
            _secure(conn)
            return audit_erasure.shred_user(conn, user_id, refs)

        counts["audit_keys"] = await run_write(audit.engine, destroy)
        if audit.keys is not None:
            audit.keys.forget(refs.ref("data_key", user_id))
        _tick(after_step, "audit_keys")

    def own(conn: Connection) -> int:
        _secure(conn)
        purposes: tuple[JobLockPurpose, ...] = ("memory_lock", "erasure_lock")
        for purpose in purposes:
            lock, old_lock = refs.job_lock(purpose, user_id), UNKEYED.job_lock(purpose, user_id)
            if lock != old_lock:  # Job rows outlive the user: no plain digest left in them.
                rename_lock(conn, old_lock, lock)
        return store_erasure.disown_conversations(conn, user_id, owner, also=[old_owner])

    counts["conversations"] = await run_write(engine, own)
    _tick(after_step, "conversations")
    report = ErasureReport(**counts)
    if audit is not None:
        payload = {
            "at": crypto.now_text(),
            "requested_by": requested_by,
            "conversations": len(ids),
            "counts": report.counts(),
        }
        event = AuditEvent(kind="erased", turn_id="erasure", payload=payload)
        await audit.append(user_chain_id(user_id, refs), [event], in_clear=True)
        _tick(after_step, "erased_event")
    if before_scrub is not None:
        await before_scrub(report)
    await scrub_files(engine, None if audit is None else audit.engine)
    return report


# -- erasure as a job ---------------------------------------------------------------------


def erase_spec(
    request_id: int, user_id: str, not_before: datetime, refs: UserRefs = UNKEYED
) -> JobSpec:
    """The job finishing request `request_id` if its caller does not (ids only; its lock
    names the user by their ref, as a memory job's does: the row outlives the erasure)."""
    return JobSpec(
        kind=ERASE,
        args={"request_id": request_id},
        lock=refs.job_lock("erasure_lock", user_id),
        scheduled_at=not_before,
    )


async def request_erasure(
    engine: AsyncEngine,
    audit: AuditLog | None,
    user_id: str,
    *,
    requested_by: str | None = None,
    after_step: Callable[[str], None] | None = None,
) -> ErasureReport:
    """Record a request to erase `user_id` with its job (one transaction), then erase here.

    While this runs, the job's time is pushed back every third of `ERASE_LEASE`; when the
    erasure is done, the request keeps the counts (its user id emptied) and the job is
    completed, in one transaction. If this process dies, the job comes due and the job
    runner finishes the erasure (every step is idempotent). Returns what this run changed.
    """
    first = utcnow() + timedelta(seconds=ERASE_LEASE)
    refs = UNKEYED if audit is None else audit.refs

    def record(conn: Connection) -> tuple[int, int]:
        request_id = store_erasure.record_request(conn, user_id, requested_by)
        (job,) = job_rows.defer(conn, [erase_spec(request_id, user_id, first, refs)])
        return request_id, job.id

    request_id, job_id = await run_write(engine, record)
    keeping = asyncio.get_running_loop().create_task(_keep_postponed(engine, job_id))

    async def stop_keeping() -> None:
        keeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeping

    async def finish(report: ErasureReport) -> None:
        await stop_keeping()  # Done: the job is completed, and the rewrite runs alone.
        await _finish(engine, request_id, report, job_id)

    try:
        return await erase_user(
            engine,
            audit,
            user_id,
            requested_by=requested_by,
            after_step=after_step,
            before_scrub=finish,
        )
    finally:
        await stop_keeping()


async def _keep_postponed(engine: AsyncEngine, job_id: int) -> None:
    """Keep the erasure's job from coming due while this process erases."""
    while True:
        await asyncio.sleep(ERASE_LEASE / 3)
        until = utcnow() + timedelta(seconds=ERASE_LEASE)
        try:
            await run_write(engine, partial(job_rows.postpone, job_id=job_id, until=until))
        except Exception as e:  # The job then comes due: the runner finishes it, harmlessly.
            log.warning("erasure.postpone_failed", error=type(e).__name__)


async def _finish(
    engine: AsyncEngine, request_id: int, report: ErasureReport, job_id: int | None
) -> None:
    def work(conn: Connection) -> None:
        _secure(conn)  # The user id's old bytes are zeroed, not left on a free page.
        store_erasure.finish_request(conn, request_id, report.counts())
        if job_id is not None:
            job_rows.complete(conn, job_id)

    await run_write(engine, work)


def erase_job_kind(engine: AsyncEngine, audit: AuditLog | None) -> JobKind:
    """The `privacy.erase` job kind: finish a request whose caller died (or failed)."""

    async def run(args: Mapping[str, Any]) -> None:
        request_id = int(args["request_id"])
        request = await _read(engine, lambda c: store_erasure.read_request(c, request_id))
        if request is None or request.done or request.user_id is None:
            return  # Finished by its caller (or another runner): nothing to do.
        log.info("erasure.resumed", request_id=request_id)
        await erase_user(
            engine,
            audit,
            request.user_id,
            requested_by=request.requested_by,
            before_scrub=lambda report: _finish(engine, request_id, report, None),
        )

    return JobKind(name=ERASE, run=run, attempts=5, backoff=5.0, timeout=3600.0)


def _tick(after_step: Callable[[str], None] | None, name: str) -> None:
    if after_step is not None:
        after_step(name)


async def _read(engine: AsyncEngine, work: Callable[[Connection], Any]) -> Any:
    async with engine.connect() as conn:
        return await conn.run_sync(work)


async def scrub_files(*engines: AsyncEngine | None) -> None:
    """On SQLite, rebuild the file (`VACUUM`) and empty the WAL (checkpoint TRUNCATE), so no
    free page, old row version or WAL frame keeps erased content. PostgreSQL: nothing here
    (dead row versions stay in the data files until VACUUM; see docs/privacy.md)."""
    seen: set[str] = set()
    for engine in engines:
        path = None if engine is None else sqlite_path(engine)
        if path is not None and path not in seen:
            seen.add(path)
            await vacuum(path)


def parse_age(text: str) -> timedelta:
    """`90d`, `12w`, `36h` or `6m` (30-day months) as a duration.

    Raises:
        ValueError: for any other form.
    """
    units = {"h": 1 / 24, "d": 1, "w": 7, "m": 30, "y": 365}
    raw = text.strip().lower()
    if len(raw) < 2 or raw[-1] not in units or not raw[:-1].isdigit() or int(raw[:-1]) < 1:
        raise ValueError(f"age {text!r}: give a number and a unit, e.g. 90d, 12w, 6m or 1y")
    return timedelta(days=int(raw[:-1]) * units[raw[-1]])


async def apply_retention(
    engine: AsyncEngine | None,
    audit: AuditLog,
    older_than: timedelta,
    *,
    dry_run: bool = False,
    transcripts: bool = False,
    now: datetime | None = None,
) -> RetentionReport:
    """Shred audit payloads older than `older_than`: destroy the data keys of every month
    that ended before the cutoff's month (rows and chain untouched). With `transcripts`,
    the conversation store's messages, summaries and outcomes older than the cutoff get
    the erased marker too. A `retention` event records each run that changed something.
    """
    cutoff = (now or datetime.now(UTC)) - older_than
    before = cutoff.strftime("%Y-%m")

    def audit_work(conn: Connection) -> int:
        if not dry_run:
            _secure(conn)
        return audit_erasure.shred_before(conn, before, dry_run=dry_run)

    keys = await (
        _read(audit.engine, audit_work) if dry_run else run_write(audit.engine, audit_work)
    )
    if audit.keys is not None and not dry_run:
        audit.keys.forget()
    counts = {"messages": 0, "summaries": 0, "outcomes": 0, "feedback": 0}
    if transcripts and engine is not None:

        def store_work(conn: Connection) -> dict[str, int]:
            _secure(conn)
            return store_erasure.age_out(conn, cutoff, dry_run=dry_run)

        counts = await (_read(engine, store_work) if dry_run else run_write(engine, store_work))
    report = RetentionReport(cutoff, before, keys, dry_run=dry_run, **counts)
    if not dry_run and any(report.counts().values()):
        payload = {
            "at": crypto.now_text(),
            "cutoff": cutoff.isoformat(),
            "older_than_days": older_than / timedelta(days=1),
            "periods_before": before,
            "counts": report.counts(),
        }
        event = AuditEvent(kind="retention", turn_id="retention", payload=payload)
        await audit.append(RETENTION_CHAIN, [event], in_clear=True)
        await scrub_files(engine, audit.engine)
    return report


# -- retention as a periodic job ----------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RetentionPolicy:
    """Retention run as a periodic job (`Orchestrator(retention=...)`), instead of cron."""

    older_than: timedelta
    """Audit payloads (and with `transcripts`, messages) older than this are shredded."""
    transcripts: bool = False
    """Also give messages, summaries and outcomes past the age the erased marker."""
    every: int = RETENTION_EVERY
    """Seconds between runs (once per period across every runner and process)."""

    def __post_init__(self) -> None:
        if not isinstance(self.older_than, timedelta) or self.older_than <= timedelta(0):
            raise ConfigError(
                f"retention older_than must be a positive timedelta, got {self.older_than!r}"
            )
        PeriodicJob(name=RETENTION, every=self.every, run=_nothing)  # Checks `every`.


async def _nothing() -> None:
    return None


def retention_policy(
    value: RetentionPolicy | timedelta | str | None, *, transcripts: bool = False
) -> RetentionPolicy | None:
    """`Orchestrator(retention=...)` as a policy: a `RetentionPolicy`, an age (`timedelta`,
    or text like `90d`, `12w`, `6m`; `transcripts` then says whether messages go too), or
    `None` (no periodic retention).

    Raises:
        ConfigError: an age that is not one.
    """
    if value is None or isinstance(value, RetentionPolicy):
        return value
    if isinstance(value, str):
        try:
            value = parse_age(value)
        except ValueError as e:
            raise ConfigError(f"retention: {e}") from None
    return RetentionPolicy(older_than=value, transcripts=transcripts)


def retention_job(engine: AsyncEngine, audit: AuditLog, policy: RetentionPolicy) -> PeriodicJob:
    """`apply_retention` as the periodic job `privacy.retention`: idempotent (what is
    shredded is not counted again), run once per period across runners, audited as a run
    from cron is (a `retention` event when it changed something)."""

    async def run() -> None:
        report = await apply_retention(
            engine, audit, policy.older_than, transcripts=policy.transcripts
        )
        if any(report.counts().values()):
            log.info("retention.applied", periods_before=report.periods_before, **report.counts())

    return PeriodicJob(name=RETENTION, every=policy.every, run=run, exclusive=True, traced=True)


@dataclass(frozen=True, kw_only=True)
class UserRecords:
    """Where a user's data is: the conversation store, the audit log, the memory table."""

    store: ConversationStore
    audit: AuditLog | None
    memories: MemoryStore
    secrets: Secrets | None = None
    """The ruled request values (`Redact`) kept per user."""


class Privacy:
    """`Orchestrator.privacy`: a customer's rights over their data (docs/privacy.md).
    Each method opens the orchestrator on first use."""

    def __init__(self, opened: Callable[[], Awaitable[UserRecords]]) -> None:
        """`opened`: the orchestrator's records, opened on first call."""
        self._opened = opened

    async def erase_user(self, user_id: str, *, requested_by: str | None = None) -> ErasureReport:
        """Erase everything stored about `user_id`: transcript, summaries and outcomes get
        the erased marker, the user's audit data keys are destroyed, an `erased` event is
        audited. Idempotent: run it again after a crash to finish it.

        The request is recorded first, with a `privacy.erase` job, then erased here; if
        this process dies meanwhile, the job runner finishes it (docs/jobs.md).
        """
        r = await self._opened()
        return await request_erasure(r.store.engine, r.audit, user_id, requested_by=requested_by)

    async def ruled_values(
        self, *, user_id: str | None = None, conversation_id: str | None = None
    ) -> RuledValues:
        """The ruled request values (`Redact`) kept for a user, or for a conversation's
        owner from every conversation of theirs: `.text(...)` shows a text as the rules say
        (for views of what was stored without `scrub_secrets`)."""
        r = await self._opened()
        if r.secrets is None:
            return RuledValues(b"", user_id or "", ())
        return await r.secrets.values(user_id=user_id, conversation_id=conversation_id)

    async def record_access(
        self, user_id: str, *, by: str, what: Sequence[str], conversation_id: str | None = None
    ) -> None:
        """Audit that `by` (an operator) read the customer's `what` (`context`,
        `transcript`, `memories`), as an `operator_read` event in the user's own chain: who,
        when, what, never the content."""
        r = await self._opened()
        if r.audit is None:
            return
        chain = user_chain_id(user_id, r.audit.refs)
        payload = {"by": by, "conversation_id": conversation_id, "what": list(what)}
        event = AuditEvent(kind="operator_read", turn_id=chain, payload=payload)
        await r.audit.append(chain, [event], in_clear=True)

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """Everything stored about `user_id` in clear, as JSON-ready data (a subject
        access request): each of their conversations with every message of every branch,
        and their current long-term facts kept by every profile (each names its profile).
        The audit log's copy is exported with `frontdesk audit export`."""
        r = await self._opened()
        shown = await self.ruled_values(user_id=user_id)  # `Redact` rules hold here too.
        conversations = []
        for row in await list_conversations(r.store.engine, user=user_id, limit=100_000):
            messages = await r.store.messages(row.conversation_id)
            conversations.append(
                {
                    "conversation_id": row.conversation_id,
                    "created_at": row.created_at,
                    "messages": [
                        {
                            "id": m.id,
                            "parent_id": m.parent_id,
                            "role": m.role,
                            "author": m.author,
                            "content": shown.text(m.content),
                            "created_at": m.created_at.isoformat(),
                        }
                        for m in messages
                    ],
                }
            )
        facts = await r.memories.current(user_id)
        return {
            "user_id": user_id,
            "conversations": conversations,
            "memories": [
                {
                    "id": f.id,
                    "text": f.text,
                    "key": f.key,
                    "source": f.source,
                    "trust": f.trust,
                    "profile": f.profile,
                    "updated_at": f.updated_at.isoformat(),
                }
                for f in facts
            ],
        }
