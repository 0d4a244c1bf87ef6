"""Token budgets per expert: what each part of a request may cost, known before it is built.

A request is cut to fit by importance, never by chopping text off the end: history loses
its oldest WHOLE exchanges first (a user turn and its answer go together, and the kept
history always starts with a user turn), documents and memory lose their lowest-ranked
items first. The system prompt cannot be cut, so a system prompt over its allowance is a
configuration error found at start-up (`Budget.check_system`), not at the first call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, Protocol, TypeVar

from frontdesk.errors import (
    ConfigError,
    QuestionOverBudget,
)
from frontdesk.frozen import quick_init
from frontdesk.threads.tokens import (
    TextGroups,
    TokenCounter,
    count_each,
    count_groups,
    count_text_groups,
)


class Turn(Protocol):
    """A thread message as the budget sees it."""

    @property
    def role(self) -> str:
        """`user` or `assistant`."""
        ...

    @property
    def content(self) -> str:
        """The turn's text."""
        ...


T = TypeVar("T", bound=Turn)


@dataclass(frozen=True, kw_only=True)
class Document:
    """A ranked piece of context (a retrieved document, a memory fact)."""

    text: str
    rank: float = 0.0
    """Higher is more relevant; the lowest-ranked go first when over the allowance."""
    id: str = ""


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Token allowances of one expert's request.

    Args:
        system: The system prompt (never cut).
        memory: Profile and memory facts.
        documents: Retrieved documents.
        history: The summary turn plus earlier turns of the thread.
        question: The new user message (never cut).
        answer: Reserved for the model's answer (its `max_tokens`).
    """

    system: int
    history: int
    question: int
    answer: int
    memory: int = 0
    documents: int = 0

    def __post_init__(self) -> None:
        bad = [
            f"{name}={value!r}"
            for name, value in self.allowances().items()
            if not isinstance(value, int) or isinstance(value, bool) or value < 0
        ]
        if bad:
            raise ConfigError(f"budget allowances must be whole numbers >= 0, got {', '.join(bad)}")

    def allowances(self) -> dict[str, int]:
        """Each part's allowance by name."""
        return {
            "system": self.system,
            "memory": self.memory,
            "documents": self.documents,
            "history": self.history,
            "question": self.question,
            "answer": self.answer,
        }

    @property
    def total(self) -> int:
        """The most tokens one call can use, input and answer reserve together."""
        return sum(self.allowances().values())

    @property
    def input_total(self) -> int:
        """The most input tokens one call can send."""
        return self.total - self.answer

    def check_system(self, tokens: int, *, expert: str = "this expert") -> None:
        """Refuse at start-up a system prompt that cannot fit.

        Raises:
            ConfigError: when `tokens` is over the system allowance.
        """
        if tokens > self.system:
            raise ConfigError(
                f"the {expert} system prompt is {tokens:,} tokens, over its {self.system:,}-token"
                f" allowance; shorten the prompt or give {expert} a larger Budget(system=...)"
            )

    def fit(
        self,
        *,
        counter: TokenCounter,
        history: Sequence[T],
        summary: str | None = None,
        question: str | None = None,
        documents: Sequence[Document] = (),
        memory: Sequence[Document] = (),
    ) -> Fit[T]:
        """Cut each part to its allowance by importance.

        Args:
            counter: Counts tokens.
            history: Earlier turns, oldest first (the question excluded).
            summary: The summary turn's full text as sent, if any; it is kept longer than any
                exchange and dropped only when it alone is over the history allowance.
            question: The new user message, if any.
            documents: Ranked documents.
            memory: Ranked memory facts.

        Raises:
            QuestionOverBudget: when the question alone is over its allowance.
        """
        return self.fit_parts(
            counter=counter,
            parts=Parts.of(history, summary=summary, question=question),
            documents=documents,
            memory=memory,
        )

    def fit_parts(
        self,
        *,
        counter: TokenCounter,
        parts: Parts[T],
        documents: Sequence[Document] = (),
        memory: Sequence[Document] = (),
    ) -> Fit[T]:
        """`fit` of the history, summary and question `parts` was made of (made once for
        a thread that several experts' budgets cut).

        Raises:
            QuestionOverBudget: when the question alone is over its allowance.
        """
        groups, summary, question = parts.groups, parts.summary, parts.question
        # Every part counted in one call (the ratio looked up once): the question's and the
        # summary's turn, then each exchange; as texts for a counter that reads no role.
        texts = parts.texts
        sizes = count_text_groups(counter, texts) if texts else []
        if sizes is None:
            framed = [
                [{"role": "user", "content": text}]
                for text in (question, summary)
                if text is not None
            ]
            framed += [[{"role": t.role, "content": t.content} for t in g] for g in groups]
            sizes = count_groups(counter, framed)
        question_tokens = sizes.pop(0) if question is not None else 0
        summary_tokens = sizes.pop(0) if summary is not None else 0
        if question_tokens > self.question:
            raise QuestionOverBudget(
                f"the message is about {question_tokens:,} tokens, over the {self.question:,}"
                " allowed; send a shorter message (or raise the expert's Budget(question=...))"
            )
        kept, dropped, summary_kept, history_tokens = _fit_history(
            groups, sizes, summary, summary_tokens, self.history
        )
        docs, docs_tokens = _fit_ranked(counter, documents, self.documents)
        facts, facts_tokens = _fit_ranked(counter, memory, self.memory)
        return Fit(
            summary=summary if summary_kept else None,
            history=kept,
            documents=docs,
            memory=facts,
            dropped_exchanges=dropped,
            summary_dropped=summary is not None and not summary_kept,
            dropped_documents=len(documents) - len(docs),
            dropped_memory=len(memory) - len(facts),
            tokens={
                "history": history_tokens,
                "documents": docs_tokens,
                "memory": facts_tokens,
                "question": question_tokens,
            },
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class Parts(Generic[T]):
    """What a budget cuts, in the shape it counts it: the history grouped into exchanges,
    and the texts of the question's turn, the summary's and each exchange (`Parts.of`).

    A turn fits one thread to three experts' budgets: the grouping and the texts' estimate
    are the same for each, so the thread makes its parts once (`UserThread.for_expert`)
    and each budget scales the estimate by its own counter's ratio.
    """

    groups: list[list[T]]
    summary: str | None
    question: str | None
    texts: TextGroups
    """`[question]` and `[summary]` (those given), then each exchange's texts."""

    @classmethod
    def of(
        cls, history: Sequence[T], *, summary: str | None = None, question: str | None = None
    ) -> Parts[T]:
        """The parts of `history` (oldest first, the question excluded), `summary` (the
        summary turn's full text as sent) and `question` (the new user message)."""
        groups = exchanges(history)
        texts = [[text] for text in (question, summary) if text is not None]
        texts += [[t.content for t in g] for g in groups]
        return cls(groups=groups, summary=summary, question=question, texts=TextGroups(texts))


@quick_init
@dataclass(frozen=True, kw_only=True)
class Fit(Generic[T]):
    """What survived `Budget.fit`, and what it cost."""

    summary: str | None
    history: list[T]
    """Kept turns, oldest first; starts with a user turn (or is empty)."""
    documents: list[Document]
    memory: list[Document]
    dropped_exchanges: int
    """Whole exchanges cut from the front of the history (leading orphan turns included)."""
    summary_dropped: bool
    dropped_documents: int
    dropped_memory: int
    tokens: Mapping[str, int]
    """Tokens kept per part: `history` (summary included), `documents`, `memory`, `question`."""

    @property
    def history_cut(self) -> bool:
        """Whether anything was cut from the history, which breaks its cacheable prefix."""
        return self.dropped_exchanges > 0 or self.summary_dropped


def exchanges(history: Sequence[T]) -> list[list[T]]:
    """Group turns into exchanges: each starts at a user turn and holds the answers after it.

    Turns before the first user turn (an orphan answer) form a group of their own.
    """
    groups: list[list[T]] = []
    for turn in history:
        if turn.role == "user" or not groups:
            groups.append([turn])
        else:
            groups[-1].append(turn)
    return groups


def _turn_tokens(counter: TokenCounter, content: str) -> int:
    return counter.count_messages([{"role": "user", "content": content}])


def question_tokens(counter: TokenCounter, text: str) -> int:
    """Tokens of `text` as the question (one user turn), counted exactly as `Budget.fit` does."""
    return _turn_tokens(counter, text)


def _fit_history(
    groups: list[list[T]],
    sizes: list[int],
    summary: str | None,
    summary_tokens: int,
    allowance: int,
) -> tuple[list[T], int, bool, int]:
    """The exchanges kept (whole, the newest first), from their token `sizes`."""
    start = 0
    # An orphan answer at the front would make the kept history start with an assistant turn.
    if groups and groups[0][0].role != "user":
        start = 1
    used = summary_tokens + sum(sizes[start:])
    while start < len(groups) and used > allowance:
        used -= sizes[start]
        start += 1
    summary_kept = summary is not None and used <= allowance
    if summary is not None and not summary_kept:
        used -= summary_tokens
    kept = [turn for group in groups[start:] for turn in group]
    return kept, start, summary_kept, used


def _fit_ranked(
    counter: TokenCounter, items: Sequence[Document], allowance: int
) -> tuple[list[Document], int]:
    if not items:
        return [], 0
    sizes = count_each(counter, [item.text for item in items])
    used = sum(sizes)
    dropped: set[int] = set()
    # Stable sort: among equal ranks the later item goes first, so earlier ones are kept.
    for index in sorted(range(len(items)), key=lambda i: (items[i].rank, -i)):
        if used <= allowance:
            break
        dropped.add(index)
        used -= sizes[index]
    return [item for i, item in enumerate(items) if i not in dropped], used


DEFAULT_BUDGETS: Mapping[str, Budget] = MappingProxyType(
    {
        # Triage routes the latest message: the summary and the last exchange or two suffice.
        "triage": Budget(system=2_000, history=800, question=4_500, answer=512, memory=200),
        # The request expert extracts fields said many turns ago (the order number on turn
        # 1), so it reads the whole unsummarised thread.
        # Passages only for a category that opts in (`Category(knowledge=True)`).
        "request": Budget(
            system=3_000, history=8_000, question=4_500, answer=1_024, memory=500, documents=1_500
        ),
        "response": Budget(
            system=2_000, history=6_000, question=4_500, answer=1_024, memory=500, documents=2_000
        ),
        # The summariser reads the previous summary and the exchanges being evicted.
        "summariser": Budget(system=2_000, history=12_000, question=0, answer=1_024),
        # The memory expert reads one user message, and the user's facts to reuse their keys.
        "memory": Budget(system=2_000, history=0, question=4_500, answer=512, memory=1_000),
    }
)
"""Per-expert defaults; `Orchestrator(budgets=...)` may override any of them."""


TEMPLATE_MARGIN = 0.05
"""The share of a model's window kept for its chat template's own tokens (role markers, the
schema's wrapping) and the local estimate's error, when a budget is cut to fit it."""


def fit_to_window(
    budget: Budget, *, context_tokens: int, system_tokens: int, expert: str
) -> Budget:
    """`budget` cut to fit a model's context window of `context_tokens` (docs/providers.md,
    "Fitting a small window").

    A budget that already fits is kept as it is. Else the system part becomes exactly
    `system_tokens` (the rendered prompt, and the output schema where it is sent), the
    answer keeps its reserve, 5% of the window is kept for the chat template, and what is
    left is shared between history, question, memory and documents in the proportions
    of the original budget (each rounded down).

    Raises:
        ConfigError: when the system prompt and the answer alone do not fit the window.
    """
    if budget.total <= context_tokens and budget.system >= system_tokens:
        return budget
    margin = int(context_tokens * TEMPLATE_MARGIN)
    room = context_tokens - margin - system_tokens - budget.answer
    parts = {
        "history": budget.history,
        "question": budget.question,
        "memory": budget.memory,
        "documents": budget.documents,
    }
    flexible = sum(parts.values())
    question_room = room * budget.question // flexible if flexible else 0
    if room <= 0 or (budget.question > 0 and question_room < 16):
        raise ConfigError(
            f"the {expert} expert does not fit the model's context_tokens={context_tokens:,}:"
            f" its system prompt (with the output schema) is {system_tokens:,} tokens and its"
            f" answer reserve {budget.answer:,}, plus {margin:,} for the chat template, which"
            " leaves no room for the conversation; use a model with a larger window, a"
            " shorter prompt (prompts_dir), or a smaller max_tokens for this expert"
        )
    scaled = {name: room * value // flexible for name, value in parts.items()} if flexible else {}
    return Budget(system=system_tokens, answer=budget.answer, **scaled)


def budget_for(expert: str, overrides: Mapping[str, Budget] | None = None) -> Budget:
    """The budget of `expert`: an override if given, else the default.

    Raises:
        ConfigError: for an expert with neither.
    """
    if overrides and expert in overrides:
        return overrides[expert]
    try:
        return DEFAULT_BUDGETS[expert]
    except KeyError:
        raise ConfigError(
            f"no token budget for expert {expert!r}; known: {', '.join(sorted(DEFAULT_BUDGETS))}"
        ) from None
