"""The thread builder: from the transcript (a tree) to the user thread the experts read.

The user thread is the path from the root to the message being answered, holding only
user and assistant turns (plus, after compaction, one summary of older turns). It is an
approximation of the transcript that is cheap to send; the transcript is what happened.

After a compaction the thread is the newest summary on the path (as its first user turn,
labelled) followed by the path after the summary's cut point. Every turn's text, and the
summary's, goes through `frontdesk.labels.neutralise` as the thread is built, so that the
summary label heading the first turn is one no user can type. Each expert then reads it
through its own token budget (`UserThread.for_expert`); between compactions the thread
only grows at its end, so the prefix up to the new question is byte-identical from turn
to turn and is marked as cacheable.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from frontdesk.frozen import quick_init
from frontdesk.labels import SUMMARY_LABEL, neutralise
from frontdesk.threads.budget import Budget, Document, Fit, Parts, budget_for
from frontdesk.threads.store import MessageRecord
from frontdesk.threads.summaries import PathSinceSummary, SummaryRecord, SummaryStore
from frontdesk.threads.tokens import EstimatingCounter, TokenCounter

__all__ = [
    "SUMMARY_LABEL",
    "ExpertView",
    "PathSource",
    "SummarySource",
    "ThreadMessage",
    "UserThread",
    "build_thread",
    "thread_since",
]


@dataclass(frozen=True, kw_only=True)
class ThreadMessage:
    """One turn of the user thread."""

    role: Literal["user", "assistant"]
    content: str
    message_id: str | None = None
    """The transcript message behind this turn (`None` for the summary turn); the last one
    when the turn joins several."""
    covers: int = 1
    """How many transcript messages this turn stands for: more than one when consecutive
    assistant messages (a person's replies during a hand-off) are joined into one turn."""

    def __post_init__(self) -> None:
        # Neutralised on construction, so that budgets count what is sent and no thread
        # can hold a copy of the summary label (or the instruction label) outside its place.
        object.__setattr__(self, "content", _neutralised(self.content))


@functools.lru_cache(maxsize=1024)
def _neutralised(text: str) -> str:
    """`neutralise(text)`, once per text: every turn builds its thread again from the
    stored messages, whose texts the turns before it already neutralised."""
    return neutralise(text)


@quick_init
@dataclass(frozen=True, kw_only=True)
class ExpertView:
    """What one expert is sent of the thread, after its budget."""

    messages: list[dict[str, str]]
    """The summary turn (if kept), the kept turns, and the question (if any)."""
    cache_prefix_messages: int
    """Leading messages that are stable between compactions (0 when the budget cut the
    history, since a prefix that changes every turn is not worth caching)."""
    fit: Fit[ThreadMessage]
    """What the budget kept and dropped."""


@dataclass(frozen=True, kw_only=True)
class UserThread:
    """What the experts are sent: an optional summary, then whole turns."""

    summary: str | None = None
    messages: list[ThreadMessage] = field(default_factory=list)
    summary_id: str | None = None
    """The stored summary in use, if any."""
    covers_until_message_id: str | None = None
    """The summary's cut point: the last transcript message it replaces."""
    replaced: int = 0
    """How many transcript messages of this path the summary replaces."""

    def __post_init__(self) -> None:
        # The summary is a model's text about user text: it may quote a label too.
        if self.summary is not None:
            object.__setattr__(self, "summary", neutralise(self.summary))

    def summary_turn(self) -> str | None:
        """The summary as the text of the thread's first user turn, labelled."""
        return f"{SUMMARY_LABEL}\n{self.summary}" if self.summary else None

    def as_messages(self) -> list[dict[str, str]]:
        """The thread as `{"role", "content"}` dicts, the summary first as a user turn."""
        turns = [{"role": m.role, "content": m.content} for m in self.messages]
        summary = self.summary_turn()
        if summary is not None:
            return [{"role": "user", "content": summary}, *turns]
        return turns

    @property
    def cache_prefix_messages(self) -> int:
        """Leading messages of `as_messages()` stable until the next compaction.

        Everything but a trailing user message (the question being answered): the next
        turn's thread starts with exactly these messages.
        """
        count = len(self.messages) + (1 if self.summary else 0)
        if self.messages and self.messages[-1].role == "user":
            count -= 1
        return count

    @functools.cached_property
    def _parts(self) -> tuple[Parts[ThreadMessage], ThreadMessage | None]:
        """The thread as every budget cuts it (the history before the question, grouped
        into exchanges, and the texts to count), and the question: made once for the
        turn's three expert views. A thread is never changed once built (its turns are
        frozen, its list never appended to: a new turn builds a new thread)."""
        history: Sequence[ThreadMessage] = self.messages
        question: ThreadMessage | None = None
        if history and history[-1].role == "user":
            history, question = history[:-1], history[-1]
        parts = Parts.of(
            history,
            summary=self.summary_turn(),
            question=question.content if question is not None else None,
        )
        return parts, question

    def for_expert(
        self,
        expert: str,
        *,
        counter: TokenCounter | None = None,
        budgets: Mapping[str, Budget] | None = None,
        memory: Sequence[Document] = (),
        documents: Sequence[Document] = (),
    ) -> ExpertView:
        """The thread as `expert` reads it: cut to its budget, with its cacheable prefix;
        `memory` (ranked facts) is cut to the memory allowance (`fit.memory`), `documents`
        (ranked passages) to the documents allowance (`fit.documents`).

        Raises:
            QuestionOverBudget: the question alone is over the expert's allowance.
            ConfigError: no budget for `expert`.
        """
        budget = budget_for(expert, budgets)
        parts, question = self._parts
        fit = budget.fit_parts(
            counter=counter or EstimatingCounter(),
            parts=parts,
            memory=memory,
            documents=documents,
        )
        messages = [{"role": "user", "content": fit.summary}] if fit.summary else []
        messages += [{"role": m.role, "content": m.content} for m in fit.history]
        prefix = 0 if fit.history_cut else len(messages)
        if question is not None:
            messages.append({"role": question.role, "content": question.content})
        return ExpertView(messages=messages, cache_prefix_messages=prefix, fit=fit)


class PathSource(Protocol):
    """The part of the store the builder needs."""

    async def path(self, leaf_id: str, *, stop_after: str | None = None) -> list[MessageRecord]:
        """Messages root -> leaf (strictly after `stop_after` when given)."""
        ...


class SummarySource(Protocol):
    """Where the builder finds summaries (`threads.summaries.SummaryStore`)."""

    async def newest_on_path(
        self, conversation_id: str, path_ids: Sequence[str]
    ) -> SummaryRecord | None:
        """The summary with the deepest cut point on the path, if any."""
        ...


async def build_thread(
    store: PathSource, leaf_id: str, *, summaries: SummarySource | None = None
) -> UserThread:
    """The user thread ending at `leaf_id` (a user message being answered, or any message).

    Args:
        store: The conversation store.
        leaf_id: The last message of the path.
        summaries: Where to look for summaries; by default the store's own database (a
            store without an `engine`, such as a test fake, has none).
    """
    engine = getattr(store, "engine", None)
    if engine is not None and (
        summaries is None or (isinstance(summaries, SummaryStore) and summaries.engine is engine)
    ):
        # The store's own database: one query that stops at the newest summary's cut point.
        return thread_since(await SummaryStore(engine).path_since_newest(leaf_id))
    path = await store.path(leaf_id)
    if summaries is None:
        summaries = SummaryStore(engine) if engine is not None else None
    found = None
    if summaries is not None and path:
        found = await summaries.newest_on_path(path[0].conversation_id, [m.id for m in path])
    cut = 0
    if found is not None:
        cut = 1 + next(i for i, m in enumerate(path) if m.id == found.covers_until_message_id)
    return _thread(found, path[cut:], cut)


def thread_since(path: PathSinceSummary) -> UserThread:
    """The user thread from a path read as far back as its newest summary's cut point
    (`SummaryStore.path_since_newest`, or `ConversationStore.start_turn`)."""
    return _thread(path.summary, path.messages, path.replaced)


def _thread(
    summary: SummaryRecord | None, after: Sequence[MessageRecord], replaced: int
) -> UserThread:
    """The thread: `summary` (if any), then the messages `after` its cut point."""
    return UserThread(
        summary=summary.content if summary is not None else None,
        messages=_alternating(after),
        summary_id=summary.id if summary is not None else None,
        covers_until_message_id=summary.covers_until_message_id if summary is not None else None,
        replaced=replaced,
    )


ASSISTANT_JOIN = "\n\n"
"""Between the texts of consecutive assistant messages joined into one assistant turn."""


def _alternating(messages: Sequence[MessageRecord]) -> list[ThreadMessage]:
    """The messages as thread turns, consecutive assistant messages joined into one turn.

    During a hand-off an operator may write several messages in a row, or right after the
    bot's own reply; the transcript keeps each, and the thread, which alternates user and
    assistant turns, sees them as one assistant turn (`covers` counts them).
    """
    runs: list[list[MessageRecord]] = []
    for m in messages:
        if m.role == "assistant" and runs and runs[-1][-1].role == "assistant":
            runs[-1].append(m)
        else:
            runs.append([m])
    return [
        _turn(run[0].role, run[0].content, run[0].id)
        if len(run) == 1
        else ThreadMessage(
            role=run[0].role,
            content=ASSISTANT_JOIN.join(m.content for m in run),
            message_id=run[-1].id,
            covers=len(run),
        )
        for run in runs
    ]


@functools.lru_cache(maxsize=4096)
def _turn(role: Literal["user", "assistant"], content: str, message_id: str) -> ThreadMessage:
    """One message's turn (immutable, so shared): every turn builds its thread again from
    the stored messages, all but the newest two the same as the turn before's. Keyed by
    the text too: a message rewritten (erased, scrubbed) is a new turn."""
    return ThreadMessage(role=role, content=content, message_id=message_id)
