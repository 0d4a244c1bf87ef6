"""Background compaction: the summariser runs after the reply, never on the user's time.

A reply whose thread passed the policy's threshold records a `compaction.compact` job in
its own transaction (`compaction_spec`; docs/jobs.md), so a crash after the reply loses
nothing; the job runs `Compactor.compact` off the reply path. One conversation's jobs
share a lock, so they never overlap; the compaction also takes a lease in the database
(`compaction:<conversation>`), so `thread compact` from the CLI never overlaps a job.
The compaction is transactional: the new summary is one row
written in one transaction after the summariser succeeded, so a failing or empty
summariser leaves the thread exactly as it was (audit event `compaction_failed`), and the
job is retried (then kept `failed`; the next reply past the threshold records another).
Running it twice changes nothing: a path no longer over its threshold is left alone. The
transcript is never touched.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog

from frontdesk.audit.store import AuditLog
from frontdesk.experts import ExpertCall
from frontdesk.experts.providers.base import Message, Model, ModelSettings
from frontdesk.experts.summariser import SummariserExpert
from frontdesk.jobs.runner import JobKind, lock_key
from frontdesk.jobs.store import JobSpec
from frontdesk.orchestrator._recorder import TurnRecorder, observing
from frontdesk.orchestrator.ruled_values import Secrets
from frontdesk.prompts import load_prompt
from frontdesk.ruled import RuledValues
from frontdesk.threads.builder import build_thread
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.store import ConversationStore
from frontdesk.threads.summaries import SummaryRecord, SummaryStore
from frontdesk.threads.tokens import TokenCounter

log = structlog.get_logger("frontdesk.compaction")

LEASE_TTL = 120.0
"""Seconds a compaction lease lasts; a crashed compactor's lease expires after this."""

Status = Literal["compacted", "not_needed", "busy", "failed"]
COMPACT = "compaction.compact"
"""The job kind that compacts one path of a conversation."""


def compaction_spec(conversation_id: str, leaf_id: str, profile: str | None = None) -> JobSpec:
    """The job compacting the path ending at `leaf_id`. One conversation's never overlap
    (`lock`), and while one waits no other is recorded (`queueing_lock`): every turn past
    the threshold asks, and one job answers them all (it compacts up to its own leaf; a
    turn still past the threshold after it asks again)."""
    key = lock_key("compaction", conversation_id)
    return JobSpec(
        kind=COMPACT,
        args={"conversation_id": conversation_id, "leaf_id": leaf_id}
        | ({} if profile is None else {"profile": profile}),
        lock=key,
        queueing_lock=key,
    )


class CompactionNotDone(Exception):
    """A compaction job's attempt failed or found the lease taken: it is retried."""


@dataclass(frozen=True, kw_only=True)
class CompactionResult:
    """What one compaction attempt did."""

    status: Status
    summary: SummaryRecord | None = None
    evicted: int = 0
    """Transcript messages the new summary covers beyond the previous one."""
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Compactor:
    """Compacts one path of a conversation when it passes the policy's threshold."""

    store: ConversationStore
    summariser: SummariserExpert
    policy: CompactionPolicy
    counter: TokenCounter
    audit: AuditLog | None = None
    lease_ttl: float = LEASE_TTL
    secrets: Secrets | None = None
    """Kept ruled values (`Redact`): never sent to the summariser, never in a summary."""

    async def compact(
        self, conversation_id: str, leaf_id: str, *, force: bool = False
    ) -> CompactionResult:
        """Summarise the older exchanges of the path ending at `leaf_id`, if due.

        Args:
            conversation_id: The conversation.
            leaf_id: The last message of the path (the reply just stored).
            force: Compact even under the threshold (keeping the policy's last exchanges).
        """
        if not force and not await self._due(leaf_id):
            # Most turns: a read, no lease write, so turns never queue behind compaction.
            return CompactionResult(status="not_needed")
        name, owner = f"compaction:{conversation_id}", uuid.uuid4().hex
        if not await self.store.try_lease(name, owner, self.lease_ttl):
            log.info("compaction.busy", conversation_id=conversation_id)
            return CompactionResult(status="busy")
        try:
            return await self._compact(conversation_id, leaf_id, force=force)
        finally:
            await self.store.release_lease(name, owner)

    async def _due(self, leaf_id: str) -> bool:
        thread = await build_thread(self.store, leaf_id)
        return self.policy.plan(thread.messages, self.counter) is not None

    async def _compact(
        self, conversation_id: str, leaf_id: str, *, force: bool
    ) -> CompactionResult:
        summaries = SummaryStore(self.store.engine)
        thread = await build_thread(self.store, leaf_id, summaries=summaries)
        plan = self.policy.plan(thread.messages, self.counter, force=force)
        if plan is None:
            return CompactionResult(status="not_needed")
        values = RuledValues(b"", "", ())
        if self.secrets is not None:  # One read per compaction, off the turn's path.
            values = await self.secrets.values(conversation_id=conversation_id)
        evicted: list[Message] = [
            {"role": m.role, "content": values.text(m.content)} for m in plan.evicted
        ]
        previous = None if thread.summary is None else values.text(thread.summary)
        cut = plan.evicted[-1].message_id
        assert cut is not None  # Thread turns after the summary always come from the transcript.
        recorder = TurnRecorder(turn_id=leaf_id)
        meta = {"conversation_id": conversation_id, "turn_id": leaf_id}
        try:
            with observing(recorder):
                result = await self.summariser.run(
                    previous, evicted, metadata=meta, observer=recorder
                )
            text = values.text(result.text)
        except Exception as e:  # Any failure leaves the thread as it was; retried next turn.
            error = f"{type(e).__name__}: {e}"
            recorder.note(
                "compaction_failed", error=error, covers_until_message_id=cut, evicted=len(evicted)
            )
            await self._audit(conversation_id, recorder)
            log.warning("compaction.failed", conversation_id=conversation_id, error=error)
            return CompactionResult(status="failed", error=error)
        summary, created = await summaries.add(
            conversation_id=conversation_id,
            covers_until_message_id=cut,
            content=text,
            token_count=self.counter.count(text),
            previous_summary_id=thread.summary_id,
            covered_messages=thread.replaced + sum(m.covers for m in plan.evicted),
        )
        recorder.note(
            "compaction",
            summary_id=summary.id,
            covered_until_message_id=cut,
            previous_summary_id=thread.summary_id,
            evicted=len(evicted),
            tokens_before=plan.tokens,
            summary=summary.content,
            already_stored=not created,
        )
        await self._audit(conversation_id, recorder)
        log.info("compaction.done", conversation_id=conversation_id, evicted=len(evicted))
        return CompactionResult(status="compacted", summary=summary, evicted=len(evicted))

    async def _audit(self, conversation_id: str, recorder: TurnRecorder) -> None:
        if self.audit is None:
            return
        try:
            owner = await self.store.conversation(conversation_id)
            user_id = None if owner is None else owner.user_id
            await self.audit.append(conversation_id, recorder.events, user_id=user_id)
        except Exception:  # The summary (or the unchanged thread) stands; ops see the log.
            log.exception("compaction.audit_failed", conversation_id=conversation_id)


def summariser_expert(
    model: Model, *, settings: ModelSettings | None = None, prompts_dir: Path | None = None
) -> SummariserExpert:
    """The summariser with its versioned prompt."""
    return SummariserExpert(
        call=ExpertCall(
            expert="summariser",
            model=model,
            prompt=load_prompt("summariser", directory=prompts_dir).render(),
            settings=settings or ModelSettings(max_tokens=1024),
        )
    )


@dataclass(frozen=True)
class BackgroundCompaction:
    """The orchestrator's compaction: one `Compactor`, run now (`thread compact`) or by the
    `compaction.compact` jobs its replies record."""

    compactor: Compactor

    async def compact(
        self, conversation_id: str, leaf_id: str, *, force: bool = False
    ) -> CompactionResult:
        """Compact the path ending at `leaf_id` now (the CLI's `thread compact`)."""
        return await self.compactor.compact(conversation_id, leaf_id, force=force)

    def job_kind(self, by_profile: Mapping[str, Compactor] | None = None) -> JobKind:
        """The `compaction.compact` job kind (a failed or busy attempt is retried); a job
        recorded for a profile of `by_profile` is run by that profile's compactor."""
        compactors = by_profile or {}

        async def run(args: Mapping[str, Any]) -> None:
            compactor = compactors.get(str(args.get("profile")), self.compactor)
            result = await compactor.compact(str(args["conversation_id"]), str(args["leaf_id"]))
            if result.status in ("failed", "busy"):
                raise CompactionNotDone(result.error or result.status)

        return JobKind(name=COMPACT, run=run, timeout=LEASE_TTL)
