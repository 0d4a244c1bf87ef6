"""A blocking wrapper around `Orchestrator`, for scripts and notebooks without an event loop.

Each blocking method is the async one run on the wrapper's own event loop (`blocking`), so
its parameters, defaults and return type are the async method's own: the signatures cannot
drift (tests/test_architecture.py compares them) and mypy checks every call against them.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator, Mapping
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, Concatenate, Generic, Literal, ParamSpec, Self, TypeVar, overload

from frontdesk.audit.store import AuditLog
from frontdesk.experts import Category
from frontdesk.experts.providers import Model
from frontdesk.jobs.runner import Jobs, JobsMode
from frontdesk.orchestrator import _wiring
from frontdesk.orchestrator._compaction import BackgroundCompaction
from frontdesk.orchestrator._orchestrator import Orchestrator
from frontdesk.orchestrator.config import ExpertSettings
from frontdesk.orchestrator.erasure import Privacy, RetentionPolicy
from frontdesk.orchestrator.handoff import Handoff, Handoffs
from frontdesk.orchestrator.knowledge import Knowledge
from frontdesk.orchestrator.memory import LongTermMemory
from frontdesk.orchestrator.profile import JobSettings, Profile, Timeouts
from frontdesk.orchestrator.stream import TurnEvent, stream_turn
from frontdesk.threads.budget import Budget
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.handoff import HandoffPolicy
from frontdesk.threads.memory import MemoryStore
from frontdesk.threads.store import ConversationStore
from frontdesk.threads.tokens import TokenCounter

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


class OnLoop(Generic[T]):
    """An async object (`_target`) whose `blocking` methods run on an event loop (`_runner`)."""

    def __init__(self, target: T, runner: asyncio.Runner) -> None:
        self._target, self._runner = target, runner


class blocking(Generic[T, P, R]):
    """`name = blocking(Async.name)` in an `OnLoop[Async]`: the method, blocking.

    Reading it on an instance gives a function of the async method's parameters that runs
    the coroutine on the instance's loop and returns its result (or raises its error). The
    signature shown (`inspect.signature`, `help`) is the async method's."""

    def __init__(self, method: Callable[Concatenate[T, P], Coroutine[Any, Any, R]]) -> None:
        self._method = method
        self.__signature__ = inspect.signature(method, eval_str=True)
        self.__doc__ = f"Blocking `{method.__qualname__}`."
        self.__name__ = method.__name__

    @overload
    def __get__(self, obj: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, obj: OnLoop[T], owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, obj: OnLoop[T] | None, owner: type[Any]) -> Self | Callable[P, R]:
        if obj is None:
            return self

        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            return self(obj, *args, **kwargs)

        run.__doc__, run.__name__ = self.__doc__, self.__name__
        return run

    def __call__(self, obj: OnLoop[T], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the async method of `obj`'s target on `obj`'s loop."""
        return obj._runner.run(self._method(obj._target, *args, **kwargs))


class SyncOrchestrator(OnLoop[Orchestrator]):
    """The same API as `Orchestrator`, blocking; one private event loop per instance.

    Every public method of `Orchestrator` is here with the same parameters, and raises the
    same errors (tests/test_architecture.py compares the signatures); `close` (or `with`)
    also ends the event loop.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        """Build the `Orchestrator` (the same arguments) that this instance runs."""
        self.orchestrator = Orchestrator(*args, **kwargs)
        super().__init__(self.orchestrator, asyncio.Runner())

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
    def scrub_secrets(self) -> bool:
        """`Orchestrator.scrub_secrets`."""
        return self.orchestrator.scrub_secrets

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

    drain = blocking(Orchestrator.drain)

    def finish_in_background(self, task: asyncio.Task[Any]) -> None:
        """`Orchestrator.finish_in_background` (a task of this instance's loop)."""
        self.orchestrator.finish_in_background(task)

    aclose = blocking(Orchestrator.aclose)  # It may open again; `close` ends the loop too.

    # -- turns --------------------------------------------------------------------------

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

    handle = blocking(Orchestrator.handle)
    edit = blocking(Orchestrator.edit)
    regenerate = blocking(Orchestrator.regenerate)
    user_thread = blocking(Orchestrator.user_thread)
    transcript = blocking(Orchestrator.transcript)
    branches = blocking(Orchestrator.branches)
    switch_branch = blocking(Orchestrator.switch_branch)
    conversation = blocking(Orchestrator.conversation)
    feedback = blocking(Orchestrator.feedback)

    # -- flat aliases of the namespaces (kept for one release) --------------------------

    hand_off = blocking(Orchestrator.hand_off)
    claim = blocking(Orchestrator.claim)
    operator_reply = blocking(Orchestrator.operator_reply)
    hand_back = blocking(Orchestrator.hand_back)
    erase_user = blocking(Orchestrator.erase_user)
    remember = blocking(Orchestrator.remember)
    remember_idle_conversations = blocking(Orchestrator.remember_idle_conversations)
    memories = blocking(Orchestrator.memories)
    past_conversations = blocking(Orchestrator.past_conversations)
    correct = blocking(Orchestrator.correct)
    forget = blocking(Orchestrator.forget)
    forget_all = blocking(Orchestrator.forget_all)

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


class SyncKnowledge(OnLoop[Knowledge]):
    """`Orchestrator.knowledge`, blocking (on the `SyncOrchestrator`'s event loop)."""

    add = blocking(Knowledge.add)
    remove = blocking(Knowledge.remove)
    search = blocking(Knowledge.search)
    sources = blocking(Knowledge.sources)
    passages = blocking(Knowledge.passages)


class SyncMemory(OnLoop[LongTermMemory]):
    """`Orchestrator.memory`, blocking (on the `SyncOrchestrator`'s event loop)."""

    @property
    def store(self) -> MemoryStore:
        """`LongTermMemory.store` (async: run its calls on your own loop)."""
        return self._target.store

    remember = blocking(LongTermMemory.remember)
    recall = blocking(LongTermMemory.recall)
    past_conversations = blocking(LongTermMemory.past_conversations)
    correct = blocking(LongTermMemory.correct)
    forget = blocking(LongTermMemory.forget)
    forget_all = blocking(LongTermMemory.forget_all)
    wait = blocking(LongTermMemory.wait)


class SyncHandoffs(OnLoop[Handoffs]):
    """`Orchestrator.handoffs`, blocking (on the `SyncOrchestrator`'s event loop)."""

    open = blocking(Handoffs.open)
    queue = blocking(Handoffs.queue)
    claim = blocking(Handoffs.claim)
    reply = blocking(Handoffs.reply)
    hand_back = blocking(Handoffs.hand_back)

    def __call__(self) -> list[Handoff]:
        """Blocking `Handoffs.queue` (`orch.handoffs()`, the flat method's form)."""
        return self.queue()


class SyncPrivacy(OnLoop[Privacy]):
    """`Orchestrator.privacy`, blocking (on the `SyncOrchestrator`'s event loop)."""

    erase_user = blocking(Privacy.erase_user)
    record_access = blocking(Privacy.record_access)
    export_user = blocking(Privacy.export_user)
    ruled_values = blocking(Privacy.ruled_values)
