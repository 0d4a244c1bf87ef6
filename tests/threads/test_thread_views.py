"""A turn's expert views share one grouping and one estimate of the thread: each view must
be exactly the one the per-view computation (kept here as it was) gives, whichever views
were made before it and however the calibration moved in between."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from frontdesk.errors import QuestionOverBudget
from frontdesk.threads.budget import (
    Budget,
    Document,
    Fit,
    T,
    _fit_history,
    _fit_ranked,
    exchanges,
)
from frontdesk.threads.builder import ExpertView, ThreadMessage, UserThread
from frontdesk.threads.tokens import (
    CalibratedCounter,
    EstimatingCounter,
    TextGroups,
    TokenCounter,
    count_groups,
    count_text_groups,
)

EXPERTS = ("triage", "request", "response")


def _fit_before(
    budget: Budget,
    *,
    counter: TokenCounter,
    history: Sequence[T],
    summary: str | None = None,
    question: str | None = None,
    documents: Sequence[Document] = (),
    memory: Sequence[Document] = (),
) -> Fit[T]:
    """`Budget.fit` before the thread's parts were made once (grouped and counted anew)."""
    groups = exchanges(history)
    texts = [[text] for text in (question, summary) if text is not None]
    texts += [[t.content for t in g] for g in groups]
    sizes = count_text_groups(counter, texts) if texts else []
    if sizes is None:
        framed = [
            [{"role": "user", "content": text}] for text in (question, summary) if text is not None
        ]
        framed += [[{"role": t.role, "content": t.content} for t in g] for g in groups]
        sizes = count_groups(counter, framed)
    question_tokens = sizes.pop(0) if question is not None else 0
    summary_tokens = sizes.pop(0) if summary is not None else 0
    if question_tokens > budget.question:
        raise QuestionOverBudget("over")
    kept, dropped, summary_kept, history_tokens = _fit_history(
        groups, sizes, summary, summary_tokens, budget.history
    )
    docs, docs_tokens = _fit_ranked(counter, documents, budget.documents)
    facts, facts_tokens = _fit_ranked(counter, memory, budget.memory)
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


def _view_before(
    thread: UserThread,
    budget: Budget,
    counter: TokenCounter,
    memory: Sequence[Document],
    documents: Sequence[Document],
) -> ExpertView:
    """`UserThread.for_expert` before its parts were made once per thread."""
    history: Sequence[ThreadMessage] = thread.messages
    question: ThreadMessage | None = None
    if history and history[-1].role == "user":
        history, question = history[:-1], history[-1]
    fit = _fit_before(
        budget,
        counter=counter,
        history=history,
        summary=thread.summary_turn(),
        question=question.content if question is not None else None,
        memory=memory,
        documents=documents,
    )
    messages = [{"role": "user", "content": fit.summary}] if fit.summary else []
    messages += [{"role": m.role, "content": m.content} for m in fit.history]
    prefix = 0 if fit.history_cut else len(messages)
    if question is not None:
        messages.append({"role": question.role, "content": question.content})
    return ExpertView(messages=messages, cache_prefix_messages=prefix, fit=fit)


class Words:
    """A counter of its own (it may read the roles): counted through its methods."""

    def count(self, text: str) -> int:
        return len(text.split())

    def count_messages(self, messages: Any) -> int:
        return sum(len(str(m["content"]).split()) + len(str(m["role"])) for m in messages)


class Calibrated(CalibratedCounter):
    """A subclass: never taken for the built-in counter."""

    def count_text_groups(
        self, groups: Sequence[Sequence[str]], *, model: str = ""
    ) -> list[int] | None:
        return [7 * len(g) for g in groups]


def _counters(kind: str) -> tuple[Mapping[str, TokenCounter], CalibratedCounter | None]:
    """Each expert's counter, and the calibration a test moves between views."""
    if kind == "estimate":
        return dict.fromkeys(EXPERTS, EstimatingCounter()), None
    if kind == "words":
        return dict.fromkeys(EXPERTS, Words()), None
    base = Calibrated() if kind == "subclass" else CalibratedCounter(margin=0.07)
    if kind == "over-words":
        base = CalibratedCounter(base=Words())
    if kind == "unbound":
        return dict.fromkeys(EXPERTS, base), base
    return {e: base.for_model("small" if e == "triage" else "large") for e in EXPERTS}, base


turn_texts = st.text(alphabet=st.sampled_from("ab1 .é"), max_size=40)
threads = st.builds(
    UserThread,
    summary=st.none() | turn_texts,
    messages=st.lists(
        st.builds(ThreadMessage, role=st.sampled_from(["user", "assistant"]), content=turn_texts),
        max_size=14,
    ),
)
budgets = st.builds(
    Budget,
    system=st.just(1),
    history=st.integers(0, 60),
    question=st.integers(0, 30),
    answer=st.just(1),
    memory=st.integers(0, 20),
    documents=st.integers(0, 20),
)
ranked = st.lists(st.builds(Document, text=turn_texts, rank=st.floats(0, 1)), max_size=4)


@settings(max_examples=400, deadline=None)
@given(
    threads,
    st.permutations(EXPERTS),
    st.fixed_dictionaries(dict.fromkeys(EXPERTS, budgets)),
    st.sampled_from(["estimate", "words", "calibrated", "unbound", "subclass", "over-words"]),
    st.lists(st.tuples(st.sampled_from(["small", "large", ""]), st.integers(1, 400)), max_size=3),
    ranked,
    ranked,
)
def test_each_view_is_the_one_made_for_it_alone(
    thread: UserThread,
    order: list[str],
    by_expert: dict[str, Budget],
    kind: str,
    observed: list[tuple[str, int]],
    memory: list[Document],
    documents: list[Document],
) -> None:
    counters, calibration = _counters(kind)
    for i, expert in enumerate(order):
        if calibration is not None and i < len(observed):  # A call in between calibrates.
            model, exact = observed[i]
            calibration.observe(model, estimated=100, exact=exact)
        counter, budget = counters[expert], by_expert[expert]
        try:
            expected: ExpertView | None = _view_before(thread, budget, counter, memory, documents)
        except QuestionOverBudget:
            expected = None
        try:
            view: ExpertView | None = thread.for_expert(
                expert, counter=counter, budgets=by_expert, memory=memory, documents=documents
            )
        except QuestionOverBudget:
            view = None
        assert view == expected


@given(st.lists(st.lists(turn_texts, max_size=4), max_size=6), st.integers(1, 400))
def test_an_estimate_made_once_counts_as_each_counter_does(
    texts: list[list[str]], exact: int
) -> None:
    calibrated = CalibratedCounter(margin=0.07)
    groups = TextGroups(texts)
    for counter in (EstimatingCounter(), calibrated, calibrated.for_model("m")):
        assert count_text_groups(counter, groups) == count_text_groups(counter, texts)
        calibrated.observe("m", estimated=100, exact=exact)  # The ratio is read each time.
        calibrated.observe("", estimated=100, exact=exact)
        assert count_text_groups(counter, groups) == count_text_groups(counter, texts)
    for other in (Words(), Calibrated(), CalibratedCounter(base=Words())):
        # Counted through its own methods, as the plain groups are.
        assert count_text_groups(other, groups) == count_text_groups(other, texts)
