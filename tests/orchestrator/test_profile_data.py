"""Memories and knowledge documents belong to a profile: two businesses on one deployment
that share a user id never see each other's facts, past conversations or documents; the
customer's rights (export, erasure) still cover every profile. SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

import pytest

from frontdesk import Orchestrator, Profile
from frontdesk.errors import ConfigError, MemoryNotFound
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest

pytestmark = pytest.mark.anyio

FEES = """# Card fees

## Replacement cards
A replacement debit card costs seven pounds after the first each year.
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, db_url: str) -> str:
    """A SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_pg_url"))
    return db_url


class Team:
    """Routes every message to OTHER; keeps what each expert was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []  # (expert, every message's text joined)

    def __call__(self, request: ModelRequest) -> Any:
        text = "\n".join(str(m["content"]) for m in request.messages)
        self.sent.append((request.expert, text))
        if request.expert == "triage":
            return {"category": "OTHER", "reason": "small talk"}
        if request.expert == "memory":
            return {"facts": []}
        if request.expert == "summariser":
            return "They asked about a replacement card."
        return "a reply"

    def seen(self) -> str:
        """Everything the experts were sent since the last call."""
        text = "\n".join(t for _, t in self.sent)
        self.sent.clear()
        return text


def desks(url: str, team: Team, **b: Any) -> Orchestrator:
    """Two businesses on one runtime: `shop` (the default) and `bank`."""
    return Orchestrator(
        profiles={
            "shop": Profile(potato_categories(), model=FunctionModel(team)),
            "bank": Profile(potato_categories(), model=FunctionModel(team), **b),
        },
        store=url,
    )


async def test_a_profile_never_sends_another_profiles_facts_to_its_experts(url: str) -> None:
    """The cross-tenant leak: a fact the shop recorded about user `u` reached the bank's
    experts when the bank answered the same user id."""
    team = Team()
    orch = desks(url, team)
    try:
        await orch.remember("u", "Prefers replies in Welsh")  # The default profile: shop.
        await orch.handle("bank-1", "hello", user_id="u", profile="bank")
        assert "Welsh" not in team.seen()
        await orch.handle("shop-1", "hello", user_id="u", profile="shop")
        assert "Prefers replies in Welsh" in team.seen()  # Its own profile's turns do see it.
    finally:
        await orch.aclose()


async def test_each_profile_keeps_recalls_and_forgets_its_own_facts(url: str) -> None:
    team = Team()
    orch = desks(url, team)
    try:
        shop = await orch.memory.remember("u", "Likes waxy potatoes", key="taste")
        bank = await orch.memory.remember("u", "Salary paid on the 25th", profile="bank")
        # The same key in another profile supersedes nothing there.
        await orch.memory.remember("u", "Likes floury potatoes", key="taste", profile="bank")
        assert shop.profile == "shop" and bank.profile == "bank"
        assert [m.text for m in await orch.memory.recall("u")] == ["Likes waxy potatoes"]
        assert [m.text for m in await orch.memory.recall("u", profile="bank")] == [
            "Likes floury potatoes",
            "Salary paid on the 25th",
        ]
        # A turn's lookup (best matches, then the newest) finds only its profile's facts.
        assert [m.text for m in await orch.memory.recall("u", "salary")] == [shop.text]
        found = await orch.memory.recall("u", "salary", profile="bank")
        assert found[0].id == bank.id
        # Another profile's fact is no fact of this one: not corrected, not forgotten.
        with pytest.raises(MemoryNotFound):
            await orch.memory.correct("u", bank.id, "Salary on the 1st")
        with pytest.raises(MemoryNotFound):
            await orch.memory.forget("u", bank.id)
        assert await orch.memory.forget_all("u") == 1
        assert len(await orch.memory.recall("u", profile="bank")) == 2
        with pytest.raises(ConfigError, match="no profile 'loans'"):
            await orch.memory.recall("u", profile="loans")
    finally:
        await orch.aclose()


async def test_handlers_and_the_memory_expert_write_for_the_conversations_profile(
    url: str,
) -> None:
    team = Team()

    def learns(request: ModelRequest) -> Any:
        if request.expert == "memory":
            return {"facts": [{"text": "Lives in Leeds", "key": "city"}]}
        return team(request)

    orch = Orchestrator(
        profiles={
            "shop": Profile(potato_categories(), model=FunctionModel(team)),
            "bank": Profile(potato_categories(), model=FunctionModel(learns)),
        },
        store=url,
    )
    try:
        await orch.handle("bank-1", "I live in Leeds now", user_id="u", profile="bank")
        assert await orch.memory.wait() == 0
        assert [m.text for m in await orch.memory.recall("u", profile="bank")] == ["Lives in Leeds"]
        assert await orch.memory.recall("u") == []  # The shop never learnt it.
    finally:
        await orch.aclose()


async def test_past_conversations_stay_with_their_profile(url: str) -> None:
    team = Team()
    orch = desks(url, team)
    try:
        await orch.handle("bank-1", "my card is lost", user_id="u", profile="bank")
        await orch.handle("shop-1", "hello", user_id="u", profile="shop")
        assert await orch.memory.wait() == 0
        # What the idle sweep does for each idle conversation (here at once, not after a day).
        past = orch._past
        assert past is not None
        kept = await past.remember("bank-1")
        assert kept is not None and kept.profile == "bank"
        assert [m.conversation_id for m in await orch.memory.past_conversations("u")] == []
        [summary] = await orch.memory.past_conversations("u", profile="bank")
        assert summary.conversation_id == "bank-1"
        team.seen()
        await orch.handle("shop-2", "hello", user_id="u", profile="shop")
        assert "replacement card" not in team.seen()
        await orch.handle("bank-2", "hello", user_id="u", profile="bank")
        assert "replacement card" in team.seen()
        shops = await past.remember("shop-1")
        assert shops is not None and shops.profile == "shop"
        assert await past.remember("shop-1") is None  # Kept already.
    finally:
        await orch.aclose()


async def test_export_and_erasure_cover_the_user_in_every_profile(url: str) -> None:
    team = Team()
    orch = desks(url, team)
    try:
        await orch.memory.remember("u", "Likes waxy potatoes")
        await orch.memory.remember("u", "Salary paid on the 25th", profile="bank")
        exported = await orch.privacy.export_user("u")
        assert {(m["profile"], m["text"]) for m in exported["memories"]} == {
            ("shop", "Likes waxy potatoes"),
            ("bank", "Salary paid on the 25th"),
        }
        await orch.privacy.erase_user("u", requested_by="test")
        assert await orch.memory.recall("u") == []
        assert await orch.memory.recall("u", profile="bank") == []
    finally:
        await orch.aclose()


async def test_knowledge_documents_belong_to_a_profile(url: str) -> None:
    team = Team()
    orch = desks(url, team)
    try:
        assert await orch.knowledge.add("fees.md", FEES, profile="bank") == 1
        assert await orch.knowledge.search("replacement card") == []
        assert await orch.knowledge.sources() == []
        [found] = await orch.knowledge.search("replacement card", profile="bank")
        assert found.source == "fees.md"
        team.seen()
        await orch.handle("shop-1", "what does a replacement card cost", user_id="u")
        assert "seven pounds" not in team.seen()
        await orch.handle("bank-1", "what does a replacement card cost", profile="bank")
        assert "seven pounds" in team.seen()
        # A source name is one library's: the shop's own fees.md is another document.
        await orch.knowledge.add("fees.md", "# Delivery\nDelivery is free over 20 pounds.")
        assert [p.title for p in await orch.knowledge.passages()] == ["Delivery"]
        assert await orch.knowledge.remove("fees.md") == 1
        assert await orch.knowledge.sources(profile="bank") == ["fees.md"]
    finally:
        await orch.aclose()


async def test_a_profile_may_read_another_profiles_library(url: str) -> None:
    team = Team()
    orch = desks(url, team, knowledge_source="shop")
    try:
        await orch.knowledge.add("fees.md", FEES)  # The shop's library.
        [found] = await orch.knowledge.search("replacement card", profile="bank")
        assert found.source == "fees.md"
        team.seen()
        await orch.handle("bank-1", "what does a replacement card cost", profile="bank")
        assert "seven pounds" in team.seen()
        assert json.dumps(await orch.knowledge.sources(profile="bank")) == '["fees.md"]'
    finally:
        await orch.aclose()
