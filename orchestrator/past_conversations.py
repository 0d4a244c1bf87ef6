"""Memories of past conversations: a conversation's summary kept as a memory of its user.

When a conversation has been idle for a while (`PastConversations.idle_after`) or is handed
back by a person, the summariser summarises its active path (its rolling summary, if any,
and the turns after it) and the summary is kept as a memory of the conversation's owner
(`source="conversation_summary"`, with the conversation id and the last message it covers).
From then on it is retrieved like any fact (`threads.memory.FullTextRetriever`), listed by
`memories`, forgettable, and erased with the user. A newer summary of the same conversation
supersedes the older (one key per conversation); a conversation already kept up to its
newest message is not summarised again.

The idle trigger is background work: `remember_idle` is the function a periodic job calls
(`Orchestrator.remember_idle_conversations`; the jobs runner schedules it,
docs/jobs.md). A database lease per
conversation (`summary-memory:<id>`) keeps two processes from summarising the same one.
The summariser's call and the write are audited in the conversation's chain, under the
user's data key; a failure is logged and audited (`memory_failed`), never raised to a turn.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import structlog

from frontdesk.audit.crypto import ERASED
from frontdesk.audit.store import AuditLog
from frontdesk.experts.providers import Message
from frontdesk.experts.summariser import SummariserExpert
from frontdesk.memory import MAX_SUMMARY_CHARS, Memory
from frontdesk.orchestrator._recorder import TurnRecorder, observing
from frontdesk.orchestrator.erasure import ERASED_OWNER_PREFIX
from frontdesk.orchestrator.ruled_values import Secrets
from frontdesk.ruled import RuledValues
from frontdesk.threads.builder import build_thread
from frontdesk.threads.memory import SUMMARY_SOURCE, MemoryStore
from frontdesk.threads.store import ConversationStore

__all__ = ["IDLE_AFTER", "PastConversations", "shortened"]

log = structlog.get_logger("frontdesk.memory")

IDLE_AFTER = timedelta(minutes=30)
"""How long a conversation goes without a message before its summary is kept (default)."""
CLOSE_TIMEOUT = 60.0
"""Seconds `aclose` waits for summaries being kept before cancelling them."""
LEASE_TTL = 120.0
"""Seconds a summary's lease lasts (a crashed worker's lease expires after this)."""


def shortened(text: str, limit: int = MAX_SUMMARY_CHARS) -> str:
    """`text` on one line, cut at a word to at most `limit` characters (an ellipsis says so)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - 1)
    return text[: cut if cut > 0 else limit - 1].rstrip() + "…"


@dataclass(kw_only=True)
class PastConversations:
    """Keeps the summaries of idle and handed-back conversations as memories."""

    store: ConversationStore
    memory: MemoryStore
    """The default profile's: each summary is kept for its conversation's profile (this
    one for a conversation from before profiles)."""
    summariser: SummariserExpert
    audit: AuditLog | None = None
    idle_after: timedelta = IDLE_AFTER
    secrets: Secrets | None = None
    """Kept ruled values (`Redact`): never sent to the summariser, never in a summary."""
    _tasks: set[asyncio.Task[Memory | None]] = field(default_factory=set)

    def schedule(self, conversation_id: str) -> None:
        """Keep the conversation's summary in the background (a hand-back: the person's
        answer is never held up by the summariser); `wait` waits for it."""
        task = asyncio.get_running_loop().create_task(self._quietly(conversation_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _quietly(self, conversation_id: str) -> Memory | None:
        try:
            return await self.remember(conversation_id)
        except Exception as e:  # A background task has no caller to raise to.
            log.warning("memory.summary_crashed", conversation_id=conversation_id, error=e)
            return None

    async def wait(self, within: float = CLOSE_TIMEOUT) -> None:
        """Wait for the summaries started so far; past `within` seconds, cancel the rest."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _done, late = await asyncio.wait(tasks, timeout=within)
        for task in late:
            task.cancel()
        if late:
            await asyncio.gather(*late, return_exceptions=True)

    async def remember_idle(self, *, now: datetime | None = None, limit: int = 50) -> int:
        """Keep the summary of each conversation idle for `idle_after` whose newest message
        no summary covers yet (at most `limit`, the longest idle first); how many were kept.

        The periodic job: safe to run in several processes at once, and again after a
        crash (what was kept is skipped, what was not is tried again)."""
        cutoff = (now or datetime.now(UTC)) - self.idle_after
        due = await self.memory.idle_conversations(
            idle_before=cutoff, skip_owner_prefix=ERASED_OWNER_PREFIX, limit=limit
        )
        kept = 0
        for conversation_id, _user_id, _leaf_id in due:
            kept += await self.remember(conversation_id) is not None
        return kept

    async def remember(self, conversation_id: str) -> Memory | None:
        """Summarise the conversation's active path now and keep it as a memory of its
        owner; `None` when there is nothing to keep (no owner, no message, an erased owner,
        already kept up to its newest message, another process at it, or a failure)."""
        record = await self.store.conversation(conversation_id)
        if record is None or record.user_id is None or record.active_leaf_id is None:
            return None
        if record.user_id.startswith(ERASED_OWNER_PREFIX):
            return None
        name, owner = f"summary-memory:{conversation_id}", uuid.uuid4().hex
        if not await self.store.try_lease(name, owner, LEASE_TTL):
            return None
        try:
            return await self._remember(conversation_id, record.user_id, record.active_leaf_id)
        finally:
            await self.store.release_lease(name, owner)

    async def _remember(self, conversation_id: str, user_id: str, leaf_id: str) -> Memory | None:
        current = [
            m
            for m in await MemoryStore(self.memory.engine, profile=None).current(user_id)
            if m.source == SUMMARY_SOURCE and m.conversation_id == conversation_id
        ]
        if any(m.message_id == leaf_id for m in current):
            return None  # Kept up to its newest message already.
        thread = await build_thread(self.store, leaf_id)
        values = RuledValues(b"", user_id, ())
        if self.secrets is not None:  # Ruled values (`Redact`): never sent, never kept.
            values = await self.secrets.values(user_id=user_id)
        turns: list[Message] = [
            {"role": m.role, "content": values.text(m.content)} for m in thread.messages
        ]
        if not turns:
            return None
        previous = None if thread.summary is None else values.text(thread.summary)
        recorder = TurnRecorder(turn_id=leaf_id)
        meta = {"conversation_id": conversation_id, "turn_id": leaf_id}
        try:
            with observing(recorder):
                result = await self.summariser.run(
                    previous, turns, metadata=meta, observer=recorder
                )
            written = await self.memory.keep_summary(
                user_id,
                conversation_id,
                leaf_id,
                shortened(values.text(result.text)),
                erased=ERASED,
            )
        except Exception as e:  # Background work: audited and logged, tried again later.
            recorder.note("memory_failed", error=f"{type(e).__name__}: {e}")
            await self._audit(conversation_id, user_id, recorder)
            log.warning("memory.summary_failed", conversation_id=conversation_id, error=e)
            return None
        if written is None:  # The user was erased meanwhile: nothing is kept.
            return None
        memory, superseded = written
        recorder.note(
            "memory_written",
            memory_ids=[memory.id],
            superseded=superseded,
            keys=[memory.key],
            source=SUMMARY_SOURCE,
        )
        await self._audit(conversation_id, user_id, recorder)
        return memory

    async def _audit(self, conversation_id: str, user_id: str, recorder: TurnRecorder) -> None:
        if self.audit is None or not recorder.events:
            return
        try:  # The summariser's call holds the user's words: under the user's data key.
            await self.audit.append(conversation_id, recorder.events, user_id=user_id)
        except Exception:  # The memory stands; ops see the log.
            log.exception("memory.audit_failed", conversation_id=conversation_id)
