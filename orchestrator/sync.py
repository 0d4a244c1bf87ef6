"""A blocking wrapper around `Orchestrator`, for scripts and notebooks without an event loop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from datetime import timedelta
from functools import partial
from typing import Any, Self

from frontdesk.audit.store import AuditLog
from frontdesk.knowledge import Passage
from frontdesk.memory import Memory, MemorySource
from frontdesk.orchestrator import _wiring
from frontdesk.orchestrator._compaction import BackgroundCompaction
from frontdesk.orchestrator._orchestrator import Orchestrator
from frontdesk.orchestrator.erasure import ErasureReport, RetentionPolicy
from frontdesk.orchestrator.handoff import Claim, Handoff
from frontdesk.orchestrator.jobs import Jobs, JobsMode
from frontdesk.orchestrator.knowledge import Knowledge
from frontdesk.orchestrator.memory import Memories
from frontdesk.orchestrator.reply import Reply
from frontdesk.orchestrator.stream import TurnEvent, stream_turn
from frontdesk.threads.builder import UserThread
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
    def memory(self) -> Memories:
        """`Orchestrator.memory`."""
        return self.orchestrator.memory

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
    ) -> Reply:
        """Blocking `Orchestrator.handle`."""
        return self._runner.run(
            self.orchestrator.handle(
                conversation_id, text, user_id=user_id, client_message_id=client_message_id
            )
        )

    def stream(
        self,
        conversation_id: str,
        text: str,
        *,
        user_id: str | None = None,
        client_message_id: str | None = None,
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

    def edit(self, user_message_id: str, text: str, *, user_id: str | None = None) -> Reply:
        """Blocking `Orchestrator.edit`."""
        return self._runner.run(self.orchestrator.edit(user_message_id, text, user_id=user_id))

    def regenerate(self, assistant_message_id: str, *, user_id: str | None = None) -> Reply:
        """Blocking `Orchestrator.regenerate`."""
        return self._runner.run(self.orchestrator.regenerate(assistant_message_id, user_id=user_id))

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

    def handoffs(self) -> list[Handoff]:
        """Blocking `Orchestrator.handoffs`."""
        return self._runner.run(self.orchestrator.handoffs())

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
        self, user_id: str, text: str, key: str | None = None, *, source: MemorySource = "user"
    ) -> Memory:
        """Blocking `Orchestrator.remember`."""
        return self._runner.run(self.orchestrator.remember(user_id, text, key, source=source))

    def remember_idle_conversations(self, *, limit: int = 50) -> int:
        """Blocking `Orchestrator.remember_idle_conversations`."""
        return self._runner.run(self.orchestrator.remember_idle_conversations(limit=limit))

    def memories(self, user_id: str) -> list[Memory]:
        """Blocking `Orchestrator.memories`."""
        return self._runner.run(self.orchestrator.memories(user_id))

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
