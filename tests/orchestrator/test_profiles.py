"""Profiles: several businesses on one orchestrator, each conversation answered by the one
recorded on its first transaction; the runtime settings; the feature namespaces."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from pydantic import BaseModel

from frontdesk import (
    AuditSettings,
    Category,
    HandlerContext,
    HandoffPolicy,
    JobSettings,
    Orchestrator,
    Outcome,
    Profile,
    ProfileMismatch,
    SyncOrchestrator,
    Timeouts,
)
from frontdesk.errors import ConfigError, UserError
from frontdesk.errors import ProfileMismatch as TreeProfileMismatch
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, db_url: str) -> str:
    """A SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_pg_url"))
    return db_url


class CardRequest(BaseModel):
    last_four: str | None = None


async def block_card(request: CardRequest, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Say the card is blocked.", data={"blocked": True})


CARDS = Category(
    name="CARD_BLOCK",
    description="Blocking a lost or stolen card.",
    request=CardRequest,
    handler=block_card,
)


class Triage:
    """Routes each message to the first category its triage prompt offers, and keeps the
    prompts it was shown (to see which profile's categories a turn was routed with)."""

    def __init__(self) -> None:
        self.systems: list[str] = []
        self.responses: list[str] = []

    def __call__(self, request: ModelRequest) -> Any:
        if request.expert == "triage":
            self.systems.append(request.system)
            return {"category": "OTHER", "reason": "small talk"}
        if request.expert == "memory":
            return {"facts": []}
        self.responses.append(request.system)
        return "a reply"


def two_profiles(url: str, model: Triage, **kwargs: Any) -> Orchestrator:
    return Orchestrator(
        profiles={
            "a": Profile(potato_categories(), model=FunctionModel(model), memory=False),
            "b": Profile([CARDS], model=FunctionModel(model), business_name="Sample Bank"),
        },
        store=url,
        **kwargs,
    )


async def test_each_conversation_is_routed_by_its_own_profile(url: str) -> None:
    model = Triage()
    orch = two_profiles(url, model)
    try:
        await orch.handle("c1", "hello", user_id="u", profile="a")
        assert "ORDER_STATUS" in model.systems[-1] and "CARD_BLOCK" not in model.systems[-1]
        await orch.handle("c2", "hello", user_id="u", profile="b")
        assert "CARD_BLOCK" in model.systems[-1] and "ORDER_STATUS" not in model.systems[-1]
        # Later turns, named or not, answer with the recorded profile.
        await orch.handle("c2", "again", user_id="u")
        assert "CARD_BLOCK" in model.systems[-1]
        with pytest.raises(ProfileMismatch) as raised:
            await orch.handle("c1", "as the bank", user_id="u", profile="b")
        assert raised.value.recorded == "a" and raised.value.named == "b"
        assert len(await orch.transcript("c1", user_id="u")) == 2  # Nothing was written.
        # A regeneration and an edit name the wrong one: refused the same way.
        [_, answer] = await orch.transcript("c1", user_id="u")
        with pytest.raises(ProfileMismatch):
            await orch.regenerate(answer.id, user_id="u", profile="b")
        with pytest.raises(ProfileMismatch):
            await orch.edit(answer.parent_id or "", "edited", user_id="u", profile="b")
        assert "Sample Bank" in model.responses[-1]  # c2's turn: profile b's response.
        await orch.regenerate(answer.id, user_id="u")
        assert "Sample Bank" not in model.responses[-1]  # c1's: profile a's.
        with pytest.raises(ConfigError, match="no profile 'c'"):
            await orch.handle("c3", "hello", user_id="u", profile="c")
        # The namespaces and the flat aliases, on the one runtime.
        fact = await orch.memory.remember("u", "Prefers email")
        assert [m.id for m in await orch.memory.recall("u")] == [fact.id]
        assert [m.text for m in await orch.memory.recall("u", "email")] == ["Prefers email"]
        await orch.remember("u", "Lives in Leeds", key="city")
        assert {m.text for m in await orch.memories("u")} == {"Prefers email", "Lives in Leeds"}
        assert await orch.memory.forget_all("u") == 2
    finally:
        await orch.aclose()


async def test_a_new_conversation_without_a_name_gets_the_first_profile(url: str) -> None:
    model = Triage()
    orch = two_profiles(url, model)
    try:
        await orch.handle("c1", "hello", user_id="u")
        assert "ORDER_STATUS" in model.systems[-1]
        with pytest.raises(ProfileMismatch):
            await orch.handle("c1", "hi", user_id="u", profile="b")
        await orch.handle("c1", "hi", user_id="u", profile="a")
    finally:
        await orch.aclose()


async def test_the_namespaces_and_the_flat_methods(url: str) -> None:
    model = Triage()
    orch = Orchestrator(potato_categories(), model=FunctionModel(model), store=url, memory=False)
    try:
        await orch.handle("c", "hello", user_id="u")
        opened = await orch.handoffs.open("c", "asked for a person")
        assert [h.conversation_id for h in await orch.handoffs.queue()] == ["c"]
        assert [h.conversation_id for h in await orch.handoffs()] == ["c"]  # The flat form.
        await orch.handoffs.claim("c", operator_id="op1")
        await orch.handoffs.reply("c", "A person here.", operator_id="op1")
        await orch.handoffs.hand_back("c", operator_id="op1")
        assert opened.reason == "asked for a person" and await orch.handoffs.queue() == []
        exported = await orch.privacy.export_user("u")
        [conversation] = exported["conversations"]
        assert [m["content"] for m in conversation["messages"]][:2] == ["hello", "a reply"]
        report = await orch.privacy.erase_user("u", requested_by="test")
        assert report.conversations == 1
        erased = await orch.privacy.export_user("u")
        assert erased["conversations"] == [] and erased["memories"] == []
    finally:
        await orch.aclose()


def test_the_constructor_names_at_most_twelve_parameters() -> None:
    assert len(inspect.signature(Orchestrator.__init__).parameters) - 1 <= 12


def test_flat_keywords_build_the_profile_and_the_runtime(db_url: str) -> None:
    orch = Orchestrator(
        potato_categories(),
        model="offline",
        store=db_url,
        business_name="Spud & Co",
        prompts_dir=None,
        handoff_timeout=60,
        lock_timeout=3,
        audit_on_failure="spool",
        job_concurrency=2,
    )
    assert orch.profile.business_name == "Spud & Co"
    assert orch.profile.handoff == HandoffPolicy(timeout=60)
    assert orch.timeouts == Timeouts(lock_timeout=3)
    assert orch.job_settings == JobSettings(concurrency=2)
    assert list(orch.profiles) == ["default"]
    same = Orchestrator(
        profile=Profile(potato_categories(), model="offline", business_name="Spud & Co"),
        store=db_url,
        audit=AuditSettings(on_failure="spool"),
        jobs=JobSettings(concurrency=2),
        timeouts=Timeouts(lock_timeout=3),
    )
    assert same.business_name == orch.business_name and same.timeouts == orch.timeouts


def test_an_unknown_keyword_says_where_settings_live(db_url: str) -> None:
    with pytest.raises(TypeError, match=r"'busines_name'.*did you mean 'business_name'"):
        Orchestrator(potato_categories(), model="offline", store=db_url, busines_name="x")
    with pytest.raises(TypeError, match="Profile"):
        Orchestrator(potato_categories(), model="offline", store=db_url, colour="red")
    with pytest.raises(TypeError, match="goes on its Profile"):
        Orchestrator(profile=Profile(potato_categories()), store=db_url, business_name="x")
    with pytest.raises(TypeError, match="one of categories"):
        Orchestrator(store=db_url)
    with pytest.raises(TypeError, match="not both"):
        Orchestrator(potato_categories(), store=db_url, timeouts=Timeouts(), lock_ttl=5)
    with pytest.raises(ConfigError, match="profile name"):
        Orchestrator(profiles={"no spaces": Profile(potato_categories())}, store=db_url)
    with pytest.raises(ConfigError, match="profile name"):
        Profile(potato_categories(), knowledge_source="no spaces")


async def test_settings_are_read_once_at_open(db_url: str) -> None:
    orch = Orchestrator(potato_categories(), model="offline", store=db_url, memory=False)
    orch.lock_timeout = 2
    orch.handler_errors = "raise"
    assert orch.timeouts.lock_timeout == 2 and orch.profile.handler_errors == "raise"
    await orch.open()
    try:
        with pytest.raises(UserError, match="read when the orchestrator opens"):
            orch.lock_timeout = 5
        with pytest.raises(UserError):
            orch.use_jobs("worker")
        assert orch.timeouts.lock_timeout == 2
    finally:
        await orch.aclose()


def test_profile_mismatch_is_in_the_one_tree() -> None:
    assert ProfileMismatch is TreeProfileMismatch and issubclass(ProfileMismatch, UserError)


def test_the_sync_namespaces_have_the_async_ones_names_and_signatures() -> None:
    from frontdesk.orchestrator.erasure import Privacy
    from frontdesk.orchestrator.handoff import Handoffs
    from frontdesk.orchestrator.knowledge import Knowledge
    from frontdesk.orchestrator.memory import LongTermMemory
    from frontdesk.orchestrator.sync import SyncHandoffs, SyncKnowledge, SyncMemory, SyncPrivacy

    def public(cls: type) -> set[str]:
        return {n for n in vars(cls) if not n.startswith("_")}

    pairs = (
        (LongTermMemory, SyncMemory),
        (Handoffs, SyncHandoffs),
        (Privacy, SyncPrivacy),
        (Knowledge, SyncKnowledge),
    )
    for ours, theirs in pairs:
        assert public(ours) == public(theirs), theirs.__name__
        for name in public(ours):
            if isinstance(vars(ours)[name], property):
                continue
            a = inspect.signature(getattr(ours, name), eval_str=True)
            assert inspect.signature(getattr(theirs, name)) == a, f"{theirs.__name__}.{name}"


def test_the_sync_orchestrator_serves_profiles(db_url: str) -> None:
    model = Triage()
    with SyncOrchestrator(
        profiles={
            "a": Profile(potato_categories(), model=FunctionModel(model), memory=False),
            "b": Profile([CARDS], model=FunctionModel(model), memory=False),
        },
        store=db_url,
    ) as orch:
        orch.handle("c", "hello", user_id="u", profile="b")
        assert "CARD_BLOCK" in model.systems[-1]
        with pytest.raises(ProfileMismatch):
            orch.handle("c", "hello", user_id="u", profile="a")
        orch.memory.remember("u", "Prefers email")
        assert [m.text for m in orch.memory.recall("u")] == ["Prefers email"]
