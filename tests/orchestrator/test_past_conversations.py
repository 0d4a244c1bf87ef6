"""Memories of past conversations: an idle conversation's summary is kept as a memory of
its user, retrieved in later conversations, forgettable and erased with the user."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.labels import CUSTOMER_MEMORY_LABEL
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator._compaction import summariser_expert
from frontdesk.orchestrator.past_conversations import PastConversations, shortened
from tests._pg import create_database, drop_database
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio

LATER = datetime.now(UTC) + timedelta(hours=2)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'past.db'}"
        return
    made = create_database()
    try:
        yield made
    finally:
        drop_database(made)


def _summary(request: ModelRequest) -> str:
    said = " / ".join(m["content"] for m in request.messages)
    return f"The customer disputed a card payment at Tesco. ({said[:60]})"


async def _past(orch: Orchestrator, summarise: object = _summary) -> PastConversations:
    await orch.open()
    return PastConversations(
        store=orch.store,
        memory=orch.memory.store,
        summariser=summariser_expert(FunctionModel(summarise)),  # type: ignore[arg-type]
        audit=orch.audit_log,
    )


async def test_an_idle_conversation_is_kept_once_and_recalled_later(url: str) -> None:
    team = FakeTeam()
    async with Orchestrator([], model=team.model(), store=url) as orch:
        past = await _past(orch)
        await orch.handle("c-1", "A payment at Tesco on my card is not mine", user_id="u")
        await orch.memory.wait()
        assert await past.remember_idle() == 0  # Not idle yet.
        assert await past.remember_idle(now=LATER) == 1
        assert await past.remember_idle(now=LATER) == 0  # Kept up to its newest message.
        kept = await orch.past_conversations("u")
        assert len(kept) == 1 and kept[0].conversation_id == "c-1"
        assert kept[0].text.startswith("The customer disputed a card payment at Tesco.")
        await orch.handle("c-1", "It was 42 pounds", user_id="u")
        await orch.memory.wait()
        assert await past.remember_idle(now=LATER) == 1  # Newer messages: a new summary.
        again = await orch.past_conversations("u")
        assert len(again) == 1 and again[0].id != kept[0].id  # It superseded the older.
        team.calls.clear()
        await orch.handle("c-2", "Any news on the Tesco dispute?", user_id="u")
        (response,) = [c for c in team.calls if c.expert == "response"]
        assert "disputed a card payment at Tesco" in response.memory
        assert all("Tesco." not in m["content"] for m in response.messages[:-2])
        # Not a fact: listed apart; sent as the customer's words, in the last user turn.
        assert await orch.memories("u") == []
        assert response.memory.startswith(CUSTOMER_MEMORY_LABEL)
        assert response.messages[-2]["content"].startswith(response.memory)
        assert "Tesco" not in response.system


async def test_summaries_are_forgotten_and_erased_with_the_user(url: str) -> None:
    team = FakeTeam()
    async with Orchestrator([], model=team.model(), store=url) as orch:
        past = await _past(orch)
        for conversation in ("c-1", "c-2"):
            await orch.handle(conversation, "My card was charged twice", user_id="u")
        await orch.handle("c-3", "Hello", user_id="someone-else")
        await orch.handle("c-4", "No owner here")
        await orch.memory.wait()
        assert await past.remember_idle(now=LATER) == 3  # Not the conversation without owner.
        first, second = await orch.past_conversations("u")
        await orch.forget("u", first.id)
        assert [m.id for m in await orch.past_conversations("u")] == [second.id]
        await orch.erase_user("u")
        assert await orch.past_conversations("u") == []
        assert await past.remember_idle(now=LATER) == 0  # An erased owner is never kept.
        assert await orch.past_conversations("u") == []
        kept = await orch.past_conversations("someone-else")
        assert [(m.source, m.trust) for m in kept] == [("conversation_summary", "customer")]


async def test_a_failing_summariser_keeps_nothing_and_is_audited(url: str) -> None:
    def broken(request: ModelRequest) -> str:
        raise RuntimeError("summariser down")

    team = FakeTeam()
    async with Orchestrator([], model=team.model(), store=url) as orch:
        past = await _past(orch, broken)
        await orch.handle("c-1", "My card was charged twice", user_id="u")
        await orch.memory.wait()
        assert await past.remember_idle(now=LATER) == 0
        assert await orch.memories("u") == []
        events = await orch.audit_log.events("c-1")  # type: ignore[union-attr]
        assert "memory_failed" in [e.kind for e in events]


async def test_a_summary_that_would_outlive_an_erasure_is_not_written(url: str) -> None:
    team = FakeTeam()
    async with Orchestrator([], model=team.model(), store=url) as orch:
        await _past(orch)
        await orch.handle("c-1", "My card was charged twice", user_id="u")
        await orch.memory.wait()
        record = await orch.store.conversation("c-1")
        assert record is not None and record.active_leaf_id is not None
        await orch.erase_user("u")  # Between the read of the idle list and the write.
        written = await orch.memory.store.keep_summary(
            "u", "c-1", record.active_leaf_id, "The customer was charged twice.", erased="[erased]"
        )
        assert written is None and await orch.memories("u") == []


def test_a_long_summary_is_cut_at_a_word() -> None:
    text = "word " * 600
    cut = shortened(text, 100)
    assert len(cut) <= 100 and cut.endswith("word…")
    assert shortened("  short\n summary ") == "short summary"
