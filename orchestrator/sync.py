"""A blocking wrapper around `Orchestrator`, for scripts and notebooks without an event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, Literal, Self

from frontdesk.audit.store import AuditLog
from frontdesk.experts import Category
from frontdesk.experts.providers import Model
from frontdesk.knowledge import Passage
from frontdesk.memory import Memory, MemorySource, MemoryTrust
from frontdesk.orchestrator import _wiring
from frontdesk.orchestrator._compaction import BackgroundCompaction
from frontdesk.orchestrator._orchestrator import Orchestrator
from frontdesk.orchestrator.config import ExpertSettings
from frontdesk.orchestrator.erasure import ErasureReport, Privacy, RetentionPolicy
from frontdesk.orchestrator.handoff import Claim, Handoff, Handoffs
from frontdesk.orchestrator.jobs import Jobs, JobsMode
from frontdesk.orchestrator.knowledge import Knowledge
from frontdesk.orchestrator.memory import CLOSE_TIMEOUT, LongTermMemory
from frontdesk.orchestrator.profile import JobSettings, Profile, Timeouts
from frontdesk.orchestrator.reply import Reply
from frontdesk.orchestrator.stream import TurnEvent, stream_turn
from frontdesk.threads.budget import Budget
from frontdesk.threads.builder import UserThread
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.handoff import HandoffPolicy
from frontdesk.threads.memory import MemoryStore
from frontdesk.threads.resolution import Feedback
from frontdesk.threads.store import ConversationRecord, ConversationStore, MessageRecord
from frontdesk.threads.tokens import TokenCounter


class SyncOrchestrator:
    """The same API as `Orchestrator`, blocking; one private event loop per instance.

    Every public method of `Orchestrator` is here with the same parameters, and raises the
    same errors (tests/test_architecture.py compares the signatures); `close` (or `with`)
    also ends the event loop.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Build the `Orchestrator` (the same arguments) that this instance runs."""
        self._runner = asyncio.Runner()
        self.orchestrator = Orchestrator(*args, **kwargs)

    # -- wiring and lifecycle -----------------------------------------------------------

    def counter_for(self, expert: str) -> TokenCounter:
        """`Orchestrator.counter_for`."""
        return self.orchestrator.counter_for(expert)

    @property
    def experts(self) -> _wiring.Experts:
        """`Orchestrator.experts`."""
        return self.orchestrator.experts

    @property
    def audit_enabled(self) -> bool:
        """`Orchestrator.audit_enabled`."""
        return self.orchestrator.audit_enabled

    @property
    def audit_encrypted(self) -> bool:
        """`Orchestrator.audit_encrypted`."""
        return self.orchestrator.audit_encrypted

    @property
    def store(self) -> ConversationStore:
        """`Orchestrator.store` (an async store: run its calls on your own loop)."""
        return self.orchestrator.store

    @property
    def compaction(self) -> BackgroundCompaction:
        """`Orchestrator.compaction`."""
        return self.orchestrator.compaction

    @property
    def audit_log(self) -> AuditLog | None:
        """`Orchestrator.audit_log`."""
        return self.orchestrator.audit_log

    @property
    def profile(self) -> Profile:
        """`Orchestrator.profile`."""
        return self.orchestrator.profile

    @property
    def timeouts(self) -> Timeouts:
        """`Orchestrator.timeouts`."""
        return self.orchestrator.timeouts

    @property
    def job_settings(self) -> JobSettings:
        """`Orchestrator.job_settings`."""
        return self.orchestrator.job_settings

    @property
    def categories(self) -> Mapping[str, Category]:
        """`Orchestrator.categories`."""
        return self.orchestrator.categories

    @property
    def models(self) -> Mapping[str, Model]:
        """`Orchestrator.models`."""
        return self.orchestrator.models

    @property
    def offline_by_default(self) -> bool:
        """`Orchestrator.offline_by_default`."""
        return self.orchestrator.offline_by_default

    @property
    def business_name(self) -> str:
        """`Orchestrator.business_name`."""
        return self.orchestrator.business_name

    @property
    def prompts_dir(self) -> Path | None:
        """`Orchestrator.prompts_dir`."""
        return self.orchestrator.prompts_dir

    @property
    def settings(self) -> ExpertSettings:
        """`Orchestrator.settings`."""
        return self.orchestrator.settings

    @property
    def max_message_chars(self) -> int:
        """`Orchestrator.max_message_chars`."""
        return self.orchestrator.max_message_chars

    @property
    def budgets(self) -> Mapping[str, Budget]:
        """`Orchestrator.budgets`."""
        return self.orchestrator.budgets

    @property
    def token_counter(self) -> TokenCounter:
        """`Orchestrator.token_counter`."""
        return self.orchestrator.token_counter

    @property
    def handoff_policy(self) -> HandoffPolicy:
        """`Orchestrator.handoff_policy`."""
        return self.orchestrator.handoff_policy

    @property
    def jobs_mode(self) -> JobsMode:
        """`Orchestrator.jobs_mode`."""
        return self.orchestrator.jobs_mode

    @property
    def compaction_policy(self) -> CompactionPolicy:
        """`Orchestrator.compaction_policy` (settable until it opens)."""
        return self.orchestrator.compaction_policy

    @compaction_policy.setter
    def compaction_policy(self, value: CompactionPolicy) -> None:
        self.orchestrator.compaction_policy = value

    @property
    def handler_errors(self) -> Literal["reply", "raise"]:
        """`Orchestrator.handler_errors` (settable until it opens)."""
        return self.orchestrator.handler_errors

    @handler_errors.setter
    def handler_errors(self, value: Literal["reply", "raise"]) -> None:
        self.orchestrator.handler_errors = value

    @property
    def lock_timeout(self) -> float:
        """`Orchestrator.lock_timeout` (settable until it opens)."""
        return self.orchestrator.lock_timeout

    @lock_timeout.setter
    def lock_timeout(self, value: float) -> None:
        self.orchestrator.lock_timeout = value

    @property
    def job_concurrency(self) -> int:
        """`Orchestrator.job_concurrency` (settable until it opens)."""
        return self.orchestrator.job_concurrency

    @job_concurrency.setter
    def job_concurrency(self, value: int) -> None:
        self.orchestrator.job_concurrency = value

    @property
    def memory(self) -> SyncMemory:
        """Blocking `Orchestrator.memory`."""
        return SyncMemory(self.orchestrator.memory, self._runner)

    @property
    def handoffs(self) -> SyncHandoffs:
        """Blocking `Orchestrator.handoffs`."""
        return SyncHandoffs(self.orchestrator.handoffs, self._runner)

    @property
    def privacy(self) -> SyncPrivacy:
        """Blocking `Orchestrator.privacy`."""
        return SyncPrivacy(self.orchestrator.privacy, self._runner)

    @property
    def knowledge(self) -> SyncKnowledge:
        """Blocking `Orchestrator.knowledge`."""
        return SyncKnowledge(self.orchestrator.knowledge, self._runner)

    def open(self) -> Self:
        """Blocking `Orchestrator.open`."""
        self._runner.run(self.orchestrator.open())
        return self

    def use_store(self, store: str) -> None:
        """`Orchestrator.use_store`."""
        self.orchestrator.use_store(store)

    def use_jobs(self, mode: JobsMode) -> None:
        """`Orchestrator.use_jobs`."""
        self.orchestrator.use_jobs(mode)

    def use_retention(self, retention: RetentionPolicy | timedelta | str | None) -> None:
        """`Orchestrator.use_retention`."""
        self.orchestrator.use_retention(retention)

    @property
    def jobs(self) -> Jobs:
        """`Orchestrator.jobs` (async: run its calls on your own loop)."""
        return self.orchestrator.jobs

    def drain(self, timeout: float | None = None) -> None:
        """Blocking `Orchestrator.drain`."""
        self._runner.run(self.orchestrator.drain(timeout))

    def finish_in_background(self, task: asyncio.Task[Any]) -> None:
        """`Orchestrator.finish_in_background` (a task of this instance's loop)."""
        self.orchestrator.finish_in_background(task)

    def aclose(self) -> None:
        """Blocking `Orchestrator.aclose`: the orchestrator may open again on its next call
        (`close` also ends the event loop)."""
        self._runner.run(self.orchestrator.aclose())

    # -- turns --------------------------------------------------------------------------

    def handle(
        self,
        conversation_id: str,
        text: str,
        *,
        user_id: str | None = None,
        client_message_id: str | None = None,
        profile: str | None = None,
    ) -> Reply:
        """Blocking `Orchestrator.handle`."""
        return self._runner.run(
            self.orchestrator.handle(
                conversation_id,
                text,
                user_id=user_id,
                client_message_id=client_message_id,
                profile=profile,
            )
        )

    def stream(
        self,
        conversation_id: str,
        text: str,
        *,
        user_id: str | None = None,
        client_message_id: str | None = None,
        profile: str | None = None,
    ) -> Iterator[TurnEvent]:
        """Blocking `Orchestrator.stream`: a plain iterator of the same events.

        Stopping early (closing the iterator) waits for the turn to finish and store its
        reply, since this loop only runs while it is called.
        """
        handle = partial(
            self.orchestrator.handle,
            conversation_id,
            text,
            user_id=user_id,
            client_message_id=client_message_id,
            profile=profile,
        )
        events = stream_turn(handle)  # No background: closing the iterator waits for it.
        try:
            while True:
                try:
                    event = self._runner.run(_next(events))
                except StopAsyncIteration:
                    return
                yield event
        finally:
            self._runner.run(events.aclose())

    def edit(
        self,
        user_message_id: str,
        text: str,
        *,
        user_id: str | None = None,
        profile: str | None = None,
    ) -> Reply:
        """Blocking `Orchestrator.edit`."""
        return self._runner.run(
            self.orchestrator.edit(user_message_id, text, user_id=user_id, profile=profile)
        )

    def regenerate(
        self, assistant_message_id: str, *, user_id: str | None = None, profile: str | None = None
    ) -> Reply:
        """Blocking `Orchestrator.regenerate`."""
        return self._runner.run(
            self.orchestrator.regenerate(assistant_message_id, user_id=user_id, profile=profile)
        )

    def user_thread(self, conversation_id: str, *, user_id: str | None = None) -> UserThread:
        """Blocking `Orchestrator.user_thread`."""
        return self._runner.run(self.orchestrator.user_thread(conversation_id, user_id=user_id))

    def transcript(
        self, conversation_id: str, *, user_id: str | None = None
    ) -> list[MessageRecord]:
        """Blocking `Orchestrator.transcript`."""
        return self._runner.run(self.orchestrator.transcript(conversation_id, user_id=user_id))

    def branches(self, conversation_id: str, *, user_id: str | None = None) -> list[MessageRecord]:
        """Blocking `Orchestrator.branches`."""
        return self._runner.run(self.orchestrator.branches(conversation_id, user_id=user_id))

    def switch_branch(
        self, conversation_id: str, message_id: str, *, user_id: str | None = None
    ) -> list[MessageRecord]:
        """Blocking `Orchestrator.switch_branch`."""
        return self._runner.run(
            self.orchestrator.switch_branch(conversation_id, message_id, user_id=user_id)
        )

    def hand_off(self, conversation_id: str, reason: str) -> Handoff:
        """Blocking `Orchestrator.hand_off`."""
        return self._runner.run(self.orchestrator.hand_off(conversation_id, reason))

    def claim(self, conversation_id: str, *, operator_id: str) -> Claim:
        """Blocking `Orchestrator.claim`."""
        return self._runner.run(self.orchestrator.claim(conversation_id, operator_id=operator_id))

    def operator_reply(self, conversation_id: str, text: str, *, operator_id: str) -> str:
        """Blocking `Orchestrator.operator_reply`."""
        return self._runner.run(
            self.orchestrator.operator_reply(conversation_id, text, operator_id=operator_id)
        )

    def hand_back(
        self, conversation_id: str, *, operator_id: str | None = None, resolved: bool = False
    ) -> None:
        """Blocking `Orchestrator.hand_back`."""
        self._runner.run(
            self.orchestrator.hand_back(conversation_id, operator_id=operator_id, resolved=resolved)
        )

    def conversation(
        self, conversation_id: str, *, user_id: str | None = None
    ) -> ConversationRecord:
        """Blocking `Orchestrator.conversation`."""
        return self._runner.run(self.orchestrator.conversation(conversation_id, user_id=user_id))

    def feedback(
        self, message_id: str, rating: int, *, user_id: str | None, comment: str | None = None
    ) -> Feedback:
        """Blocking `Orchestrator.feedback`."""
        return self._runner.run(
            self.orchestrator.feedback(message_id, rating, user_id=user_id, comment=comment)
        )

    def erase_user(self, user_id: str, *, requested_by: str | None = None) -> ErasureReport:
        """Blocking `Orchestrator.erase_user`."""
        return self._runner.run(self.orchestrator.erase_user(user_id, requested_by=requested_by))

    def remember(
        self,
        user_id: str,
        text: str,
        key: str | None = None,
        *,
        source: MemorySource = "user",
        trust: MemoryTrust = "verified",
    ) -> Memory:
        """Blocking `Orchestrator.remember`."""
        return self._runner.run(
            self.orchestrator.remember(user_id, text, key, source=source, trust=trust)
        )

    def remember_idle_conversations(self, *, limit: int = 50) -> int:
        """Blocking `Orchestrator.remember_idle_conversations`."""
        return self._runner.run(self.orchestrator.remember_idle_conversations(limit=limit))

    def memories(self, user_id: str) -> list[Memory]:
        """Blocking `Orchestrator.memories`."""
        return self._runner.run(self.orchestrator.memories(user_id))

    def past_conversations(self, user_id: str) -> list[Memory]:
        """Blocking `Orchestrator.past_conversations`."""
        return self._runner.run(self.orchestrator.past_conversations(user_id))

    def correct(self, user_id: str, memory_id: str, text: str, *, by: str = "user") -> Memory:
        """Blocking `Orchestrator.correct`."""
        return self._runner.run(self.orchestrator.correct(user_id, memory_id, text, by=by))

    def forget(self, user_id: str, memory_id: str, *, by: str = "user") -> None:
        """Blocking `Orchestrator.forget`."""
        self._runner.run(self.orchestrator.forget(user_id, memory_id, by=by))

    def forget_all(self, user_id: str, *, by: str = "user") -> int:
        """Blocking `Orchestrator.forget_all`."""
        return self._runner.run(self.orchestrator.forget_all(user_id, by=by))

    def close(self) -> None:
        """Close the orchestrator and the event loop."""
        try:
            self._runner.run(self.orchestrator.aclose())
        finally:
            self._runner.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _next(events: AsyncGenerator[TurnEvent, None]) -> TurnEvent:
    return await anext(events)


class SyncKnowledge:
    """`Orchestrator.knowledge`, blocking (on the `SyncOrchestrator`'s event loop)."""

    def __init__(self, knowledge: Knowledge, runner: asyncio.Runner) -> None:
        self._knowledge, self._runner = knowledge, runner

    def add(self, source: str, text: str) -> int:
        """Blocking `Knowledge.add`."""
        return self._runner.run(self._knowledge.add(source, text))

    def remove(self, source: str) -> int:
        """Blocking `Knowledge.remove`."""
        return self._runner.run(self._knowledge.remove(source))

    def search(self, query: str, limit: int = 5) -> list[Passage]:
        """Blocking `Knowledge.search`."""
        return self._runner.run(self._knowledge.search(query, limit))

    def sources(self) -> list[str]:
        """Blocking `Knowledge.sources`."""
        return self._runner.run(self._knowledge.sources())


class SyncMemory:
    """`Orchestrator.memory`, blocking (on the `SyncOrchestrator`'s event loop)."""

    def __init__(self, memory: LongTermMemory, runner: asyncio.Runner) -> None:
        self._memory, self._runner = memory, runner

    @property
    def store(self) -> MemoryStore:
        """`LongTermMemory.store` (async: run its calls on your own loop)."""
        return self._memory.store

    def remember(
        self,
        user_id: str,
        text: str,
        key: str | None = None,
        *,
        source: MemorySource = "user",
        trust: MemoryTrust = "verified",
    ) -> Memory:
        """Blocking `LongTermMemory.remember`."""
        return self._runner.run(
            self._memory.remember(user_id, text, key, source=source, trust=trust)
        )

    def recall(self, user_id: str, query: str | None = None) -> list[Memory]:
        """Blocking `LongTermMemory.recall`."""
        return self._runner.run(self._memory.recall(user_id, query))

    def past_conversations(self, user_id: str) -> list[Memory]:
        """Blocking `LongTermMemory.past_conversations`."""
        return self._runner.run(self._memory.past_conversations(user_id))

    def correct(self, user_id: str, memory_id: str, text: str, *, by: str = "user") -> Memory:
        """Blocking `LongTermMemory.correct`."""
        return self._runner.run(self._memory.correct(user_id, memory_id, text, by=by))

    def forget(self, user_id: str, memory_id: str, *, by: str = "user") -> None:
        """Blocking `LongTermMemory.forget`."""
        self._runner.run(self._memory.forget(user_id, memory_id, by=by))

    def forget_all(self, user_id: str, *, by: str = "user") -> int:
        """Blocking `LongTermMemory.forget_all`."""
        return self._runner.run(self._memory.forget_all(user_id, by=by))

    def wait(self, within: float = CLOSE_TIMEOUT) -> int:
        """Blocking `LongTermMemory.wait`."""
        return self._runner.run(self._memory.wait(within))


class SyncHandoffs:
    """`Orchestrator.handoffs`, blocking (on the `SyncOrchestrator`'s event loop)."""

    def __init__(self, handoffs: Handoffs, runner: asyncio.Runner) -> None:
        self._handoffs, self._runner = handoffs, runner

    def open(self, conversation_id: str, reason: str) -> Handoff:
        """Blocking `Handoffs.open`."""
        return self._runner.run(self._handoffs.open(conversation_id, reason))

    def queue(self) -> list[Handoff]:
        """Blocking `Handoffs.queue`."""
        return self._runner.run(self._handoffs.queue())

    def __call__(self) -> list[Handoff]:
        """Blocking `Handoffs.queue` (`orch.handoffs()`, the flat method's form)."""
        return self.queue()

    def claim(self, conversation_id: str, *, operator_id: str) -> Claim:
        """Blocking `Handoffs.claim`."""
        return self._runner.run(self._handoffs.claim(conversation_id, operator_id=operator_id))

    def reply(self, conversation_id: str, text: str, *, operator_id: str) -> str:
        """Blocking `Handoffs.reply`."""
        return self._runner.run(
            self._handoffs.reply(conversation_id, text, operator_id=operator_id)
        )

    def hand_back(
        self, conversation_id: str, *, operator_id: str | None = None, resolved: bool = False
    ) -> None:
        """Blocking `Handoffs.hand_back`."""
        self._runner.run(
            self._handoffs.hand_back(conversation_id, operator_id=operator_id, resolved=resolved)
        )


class SyncPrivacy:
    """`Orchestrator.privacy`, blocking (on the `SyncOrchestrator`'s event loop)."""

    def __init__(self, privacy: Privacy, runner: asyncio.Runner) -> None:
        self._privacy, self._runner = privacy, runner

    def erase_user(self, user_id: str, *, requested_by: str | None = None) -> ErasureReport:
        """Blocking `Privacy.erase_user`."""
        return self._runner.run(self._privacy.erase_user(user_id, requested_by=requested_by))

    def record_access(
        self, user_id: str, *, by: str, what: Sequence[str], conversation_id: str | None = None
    ) -> None:
        """Blocking `Privacy.record_access`."""
        self._runner.run(
            self._privacy.record_access(user_id, by=by, what=what, conversation_id=conversation_id)
        )

    def export_user(self, user_id: str) -> dict[str, Any]:
        """Blocking `Privacy.export_user`."""
        return self._runner.run(self._privacy.export_user(user_id))
