"""Token budgets: cut by importance, never by chopping text; pairs stay together."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontdesk.errors import ConfigError, QuestionOverBudget
from frontdesk.threads.budget import (
    DEFAULT_BUDGETS,
    Budget,
    Document,
    budget_for,
    exchanges,
)
from frontdesk.threads.tokens import EstimatingCounter

COUNTER = EstimatingCounter()


@dataclass(frozen=True)
class T:
    role: str
    content: str


NO_TURNS: list[T] = []


def chat(n: int, *, words: int = 20) -> list[T]:
    turns: list[T] = []
    for i in range(n):
        turns.append(T("user", f"question {i} " + "word " * words))
        turns.append(T("assistant", f"answer {i} " + "reply " * words))
    return turns


def tokens_of(turns: list[T]) -> int:
    return COUNTER.count_messages({"role": t.role, "content": t.content} for t in turns)


def test_total_is_known_before_any_request() -> None:
    budget = Budget(system=500, memory=100, documents=200, history=1_000, question=50, answer=250)
    assert budget.total == 2_100
    assert budget.input_total == 1_850


def test_history_loses_oldest_whole_exchanges_first() -> None:
    history = chat(10)
    per_exchange = tokens_of(history[:2])
    budget = Budget(system=100, history=3 * per_exchange, question=100, answer=100)
    fit = budget.fit(counter=COUNTER, history=history, question="and now?")
    assert fit.history == history[-6:]
    assert fit.dropped_exchanges == 7
    assert fit.history_cut
    assert fit.tokens["history"] == 3 * per_exchange
    # Text is never chopped: every kept turn is one of the originals, unchanged.
    assert all(turn in history for turn in fit.history)


def test_nothing_is_cut_when_it_fits() -> None:
    history = chat(3)
    fit = DEFAULT_BUDGETS["request"].fit(counter=COUNTER, history=history, summary="s")
    assert fit.history == history
    assert fit.summary == "s"
    assert not fit.history_cut


def test_summary_outlives_the_exchanges_and_goes_last() -> None:
    history = chat(4)
    per_exchange = tokens_of(history[:2])
    summary = "Priya, order 88213, refund of the delivery fee promised."
    summary_tokens = COUNTER.count_messages([{"role": "user", "content": summary}])
    budget = Budget(system=1, history=summary_tokens + per_exchange, question=10, answer=1)
    fit = budget.fit(counter=COUNTER, history=history, summary=summary)
    assert fit.summary == summary
    assert fit.history == history[-2:]
    tiny = Budget(system=1, history=summary_tokens - 1, question=10, answer=1)
    fit = tiny.fit(counter=COUNTER, history=history, summary=summary)
    assert fit.summary is None and fit.summary_dropped and fit.history == []
    assert fit.tokens["history"] == 0


def test_an_orphan_answer_at_the_front_is_dropped() -> None:
    history = [T("assistant", "orphan"), *chat(2)]
    fit = DEFAULT_BUDGETS["request"].fit(counter=COUNTER, history=history)
    assert fit.history == history[1:]
    assert fit.dropped_exchanges == 1


def test_documents_lose_the_lowest_ranked_first_and_keep_their_order() -> None:
    docs = [
        Document(text="alpha " * 40, rank=0.9, id="a"),
        Document(text="beta " * 40, rank=0.1, id="b"),
        Document(text="gamma " * 40, rank=0.5, id="c"),
    ]
    per_doc = COUNTER.count(docs[0].text)
    budget = Budget(system=1, history=1, question=1, answer=1, documents=2 * per_doc + 5)
    fit = budget.fit(counter=COUNTER, history=NO_TURNS, documents=docs)
    assert [d.id for d in fit.documents] == ["a", "c"]
    assert fit.dropped_documents == 1
    memory_fit = Budget(system=1, history=1, question=1, answer=1, memory=per_doc).fit(
        counter=COUNTER, history=NO_TURNS, memory=docs
    )
    assert [d.id for d in memory_fit.memory] == ["a"]
    assert memory_fit.dropped_memory == 2


def test_a_question_over_its_allowance_is_refused_not_cut() -> None:
    budget = Budget(system=1, history=1, question=10, answer=1)
    with pytest.raises(QuestionOverBudget, match="shorter message"):
        budget.fit(counter=COUNTER, history=NO_TURNS, question="word " * 100)


def test_system_prompt_over_allowance_is_a_config_error_at_start_up() -> None:
    budget = DEFAULT_BUDGETS["triage"]
    budget.check_system(budget.system)
    with pytest.raises(ConfigError, match="triage system prompt is 2,001 tokens"):
        budget.check_system(budget.system + 1, expert="triage")


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_bad_allowances_are_config_errors(bad: object) -> None:
    with pytest.raises(ConfigError, match="whole numbers"):
        Budget(system=bad, history=1, question=1, answer=1)  # type: ignore[arg-type]


def test_triage_reads_far_less_history_than_the_request_expert() -> None:
    assert DEFAULT_BUDGETS["triage"].history * 5 <= DEFAULT_BUDGETS["request"].history
    assert budget_for("triage") is DEFAULT_BUDGETS["triage"]
    custom = Budget(system=1, history=1, question=1, answer=1)
    assert budget_for("triage", {"triage": custom}) is custom
    with pytest.raises(ConfigError, match="known: memory, request"):
        budget_for("nobody")


def test_exchanges_group_a_user_turn_with_its_answers() -> None:
    turns = [T("assistant", "x"), T("user", "a"), T("assistant", "b"), T("user", "c")]
    assert exchanges(turns) == [[turns[0]], turns[1:3], [turns[3]]]


turn_lists = st.lists(
    st.builds(T, st.sampled_from(["user", "assistant"]), st.text(max_size=60)), max_size=30
)


@settings(max_examples=300, deadline=None)
@given(turn_lists, st.integers(min_value=0, max_value=400), st.none() | st.text(max_size=80))
def test_fit_properties(history: list[T], allowance: int, summary: str | None) -> None:
    budget = Budget(system=1, history=allowance, question=1_000, answer=1)
    fit = budget.fit(counter=COUNTER, history=history, summary=summary)
    # The kept history is a suffix of whole exchanges: it starts with a user turn...
    if fit.history:
        assert fit.history[0].role == "user"
        assert history[len(history) - len(fit.history) :] == fit.history
    # ...and no user turn is separated from the answers that follow it.
    kept_groups = exchanges(fit.history)
    assert all(group in exchanges(history) for group in kept_groups)
    # The history part is within its allowance.
    assert fit.tokens["history"] <= allowance
    summary_tokens = (
        COUNTER.count_messages([{"role": "user", "content": fit.summary}])
        if fit.summary is not None
        else 0
    )
    assert fit.tokens["history"] == tokens_of(fit.history) + summary_tokens
    # Cutting is minimal: the next older exchange would not have fitted.
    dropped_groups = exchanges(history)[: fit.dropped_exchanges]
    if dropped_groups and dropped_groups[-1][0].role == "user" and not fit.summary_dropped:
        assert fit.tokens["history"] + tokens_of(dropped_groups[-1]) > allowance


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.builds(Document, text=st.text(max_size=50), rank=st.floats(0, 1)), max_size=12),
    st.integers(min_value=0, max_value=100),
)
def test_documents_fit_and_the_dropped_rank_no_higher_than_the_kept(
    docs: list[Document], allowance: int
) -> None:
    budget = Budget(system=1, history=1, question=1, answer=1, documents=allowance)
    fit = budget.fit(counter=COUNTER, history=NO_TURNS, documents=docs)
    assert fit.tokens["documents"] <= allowance
    dropped = [d for d in docs if d not in fit.documents]
    if dropped and fit.documents:
        assert max(d.rank for d in dropped) <= min(d.rank for d in fit.documents)
