"""Background compaction through the real Orchestrator (issue 5's must-hold cases)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from frontdesk.errors import ModelAPIError
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator
from frontdesk.threads.builder import SUMMARY_LABEL
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.summaries import SummaryStore

pytestmark = pytest.mark.anyio


def make(team: Any, db_url: str, policy: CompactionPolicy, **models: Any) -> Orchestrator:
    """An orchestrator on the fake team, with `models` overriding experts, and `policy`."""
    orch = Orchestrator(
        potato_categories(), model={"default": team.model(), **models}, store=db_url
    )
    orch.compaction_policy = policy
    return orch


async def drain(orch: Orchestrator) -> None:
    """Wait for the background compactions started so far."""
    await orch.drain()


async def kinds(orch: Orchestrator, conversation: str) -> list[str]:
    assert orch.audit_log is not None
    return [e.kind for e in await orch.audit_log.events(conversation)]


async def test_compaction_fires_past_the_threshold_and_not_on_every_turn(
    team: Any, db_url: str
) -> None:
    team.summarise = lambda r: "Priya's order 88213 was late; refund of the fee promised."
    orch = make(team, db_url, CompactionPolicy(threshold=100, keep_exchanges=2))
    turns = 12
    for i in range(turns):
        await orch.handle("c1", f"message number {i}")
        await drain(orch)
    compactions = len(team.of("summariser"))
    assert 2 <= compactions <= turns // 3
    thread = await orch.user_thread("c1")
    assert thread.summary is not None and "88213" in thread.summary
    assert thread.messages[0].role == "user"
    assert len(thread.messages) < 2 * turns
    # The transcript keeps every message.
    assert len(await orch.transcript("c1")) == 2 * turns
    # Each compaction is audited, with the summary it wrote.
    assert (await kinds(orch, "c1")).count("compaction") == compactions
    # The summariser saw the previous summary and whole exchanges, roles kept.
    last = team.of("summariser")[-1]
    assert last.messages[0]["content"].startswith("Summary so far")
    assert [m["role"] for m in last.messages[1:-1]] == ["user", "assistant"] * (
        (len(last.messages) - 2) // 2
    )
    await orch.aclose()


async def test_the_prefix_sent_is_byte_identical_between_compactions(
    team: Any, db_url: str
) -> None:
    orch = make(team, db_url, CompactionPolicy(threshold=100, keep_exchanges=2))
    for i in range(12):
        await orch.handle("c2", f"message number {i}")
        await drain(orch)
    final = (await orch.user_thread("c2")).as_messages()[0]
    await orch.aclose()
    calls = team.of("triage")
    # A compaction after the last turn has no later call to show it.
    expected = len(team.of("summariser")) - (final != calls[-1].messages[0])
    boundaries = 0
    for before, after in zip(calls, calls[1:], strict=False):
        previous = list(before.messages)
        if after.messages[: len(previous)] == previous:
            continue
        # Otherwise a compaction happened in between: the thread restarts from its summary.
        boundaries += 1
        assert after.messages[0]["content"].startswith(SUMMARY_LABEL)
    assert boundaries == expected
    assert boundaries >= 2


async def test_the_reply_returns_before_the_summariser_runs(team: Any, db_url: str) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_summariser(request: ModelRequest) -> str:
        started.set()
        await release.wait()
        return "the summary"

    orch = make(
        team,
        db_url,
        CompactionPolicy(threshold=1, keep_exchanges=1),
        summariser=FunctionModel(slow_summariser),
    )
    await orch.handle("c3", "first")
    await orch.handle("c3", "second")
    await asyncio.wait_for(started.wait(), timeout=10)
    # The summariser is blocked, yet the next turn is answered at once, unsummarised.
    reply = await asyncio.wait_for(orch.handle("c3", "third"), timeout=10)
    assert reply.text
    assert (await orch.user_thread("c3")).summary is None
    release.set()
    await drain(orch)
    thread = await orch.user_thread("c3")
    assert thread.summary == "the summary"
    await orch.aclose()


async def test_a_failing_summariser_leaves_the_thread_unchanged_and_is_retried(
    team: Any, db_url: str
) -> None:
    answers: list[Any] = [ModelAPIError("provider down"), "   ", "Summary at last."]
    seen: list[tuple[str | None, list[str]]] = []

    def flaky(request: ModelRequest) -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    orch = make(
        team,
        db_url,
        CompactionPolicy(threshold=1, keep_exchanges=1),
        summariser=FunctionModel(flaky),
    )
    await orch.handle("c4", "one")
    await drain(orch)
    thread = await orch.user_thread("c4")
    seen.append((thread.summary, [m.content for m in thread.messages if m.role == "user"]))
    await orch.handle("c4", "two")
    await drain(orch)  # The job: an error, blank text (retried, the thread untouched), a summary.
    thread = await orch.user_thread("c4")
    assert seen == [(None, ["one"])]
    assert thread.summary == "Summary at last."
    assert [m.content for m in thread.messages if m.role == "user"] == ["two"]
    assert len(await orch.transcript("c4")) == 4
    events = await kinds(orch, "c4")
    assert events.count("compaction_failed") == 2 and events.count("compaction") == 1
    assert events.index("compaction") > max(
        i for i, kind in enumerate(events) if kind == "compaction_failed"
    )
    assert await orch.jobs.list() == []  # Done: nothing pending, nothing failed.
    await orch.aclose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database two "processes" (two orchestrators with their own engines) share."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
        return
    yield str(request.getfixturevalue("fresh_pg_url"))


async def test_two_processes_compacting_at_once_one_compacts(team: Any, shared_url: str) -> None:
    async def summariser(request: ModelRequest) -> str:
        await asyncio.sleep(0.2)
        return "one summary"

    never = CompactionPolicy(threshold=1_000_000, keep_exchanges=1)
    first = make(team, shared_url, never, summariser=FunctionModel(summariser))
    second = make(team, shared_url, never, summariser=FunctionModel(summariser))
    for text in ["a", "b", "c"]:
        reply = await first.handle("c5", text)
    await drain(first)
    await second.open()
    due = CompactionPolicy(threshold=1, keep_exchanges=1)
    compactors = [replace(o.compaction.compactor, policy=due) for o in (first, second)]
    results = await asyncio.gather(*(c.compact("c5", reply.message_id) for c in compactors))
    assert sorted(r.status for r in results) == ["busy", "compacted"]
    stored = await SummaryStore(first.store.engine).for_conversation("c5")
    assert [s.content for s in stored] == ["one summary"]
    # The lease is released: a later forced compaction by the other process works.
    again = await compactors[1].compact("c5", reply.message_id, force=True)
    assert again.status in {"compacted", "not_needed"}
    await first.aclose()
    await second.aclose()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
async def test_turns_past_the_threshold_leave_one_compaction_job_waiting(
    team: Any, db_url: str, backend: str, request: pytest.FixtureRequest
) -> None:
    """Every turn past the threshold asks for a compaction, but while one job waits no
    other is recorded (its queueing lock): a backlog of jobs that find nothing to do was
    most of a long conversation's turn cost. `jobs="worker"`: nobody here runs them."""
    url = db_url if backend == "sqlite" else str(request.getfixturevalue("fresh_pg_url"))
    orch = Orchestrator(potato_categories(), model=team.model(), store=url, jobs="worker")
    orch.compaction_policy = CompactionPolicy(threshold=100, keep_exchanges=2)
    try:
        for i in range(8):
            await orch.handle("c1", f"message number {i}, about my late order 88213")
        waiting = [j for j in await orch.jobs.list() if j.kind == "compaction.compact"]
    finally:
        await orch.aclose()
    assert len(waiting) == 1 and waiting[0].status == "todo"
    assert waiting[0].args["conversation_id"] == "c1"
