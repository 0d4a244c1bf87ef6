"""The compaction policy: whole exchanges, evicted in blocks past a threshold."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from frontdesk.errors import ConfigError
from frontdesk.threads.budget import exchanges
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.tokens import EstimatingCounter

COUNTER = EstimatingCounter()


@dataclass(frozen=True)
class T:
    role: str
    content: str


def exchange(i: int) -> list[T]:
    return [T("user", f"question {i} " + "word " * 20), T("assistant", f"answer {i} " + "x " * 40)]


def test_nothing_happens_under_the_threshold() -> None:
    turns = exchange(1) + exchange(2)
    assert CompactionPolicy(threshold=10_000, keep_exchanges=1).plan(turns, COUNTER) is None


def test_past_the_threshold_all_but_the_last_whole_exchanges_go() -> None:
    turns = [t for i in range(6) for t in exchange(i)]
    plan = CompactionPolicy(threshold=100, keep_exchanges=2).plan(turns, COUNTER)
    assert plan is not None
    assert plan.evicted == turns[:8]
    assert plan.kept == turns[8:]
    assert plan.kept[0].role == "user"
    assert plan.tokens > 100


def test_a_path_of_only_the_kept_exchanges_is_never_compacted() -> None:
    turns = exchange(1) + exchange(2)
    assert CompactionPolicy(threshold=1, keep_exchanges=2).plan(turns, COUNTER) is None


def test_force_ignores_the_threshold_but_keeps_the_last_exchanges() -> None:
    turns = [t for i in range(3) for t in exchange(i)]
    policy = CompactionPolicy(threshold=100_000, keep_exchanges=1)
    assert policy.plan(turns, COUNTER) is None
    plan = policy.plan(turns, COUNTER, force=True)
    assert plan is not None and plan.kept == turns[4:]


@pytest.mark.parametrize(("threshold", "keep"), [(0, 2), (100, 0)])
def test_bad_policy_is_a_config_error(threshold: int, keep: int) -> None:
    with pytest.raises(ConfigError):
        CompactionPolicy(threshold=threshold, keep_exchanges=keep)


def simulate(policy: CompactionPolicy, turns: int) -> tuple[list[int], list[list[T]]]:
    """Append exchanges one by one, compacting as the orchestrator does after each reply."""
    path: list[T] = []
    cut = 0
    compacted_after: list[int] = []
    threads: list[list[T]] = []
    for i in range(turns):
        threads.append(path[cut:])
        path += exchange(i)
        plan = policy.plan(path[cut:], COUNTER)
        if plan is not None:
            cut += len(plan.evicted)
            compacted_after.append(i)
    return compacted_after, threads


def test_compaction_fires_in_blocks_not_every_turn() -> None:
    compacted_after, threads = simulate(CompactionPolicy(threshold=400, keep_exchanges=2), 40)
    assert 3 <= len(compacted_after) <= 40 // 3
    # Between two compactions each thread starts with the one before it: a stable prefix.
    compactions = set(compacted_after)
    for i in range(1, len(threads)):
        if i - 1 not in compactions:
            assert threads[i][: len(threads[i - 1])] == threads[i - 1]


@settings(max_examples=100, deadline=None)
@given(st.integers(50, 2_000), st.integers(1, 5), st.integers(1, 30))
def test_evicted_turns_are_whole_exchanges_and_the_rest_is_kept(
    threshold: int, keep: int, n: int
) -> None:
    turns = [t for i in range(n) for t in exchange(i)]
    plan = CompactionPolicy(threshold=threshold, keep_exchanges=keep).plan(turns, COUNTER)
    if plan is None:
        return
    assert plan.evicted + plan.kept == turns
    assert len(exchanges(plan.kept)) == keep
    assert plan.evicted[-1].role == "assistant"
