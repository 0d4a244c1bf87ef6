"""Spend limits (`Orchestrator(spend_limit=SpendLimit(...))`): counted from the stored turns'
usage, across orchestrators on one database, checked before any model call."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from frontdesk import Orchestrator, SpendLimit
from frontdesk.errors import ConfigError, SpendLimitReached
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, ModelRequest, ModelResponse, Usage
from frontdesk.experts.providers.function import to_response
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio

MODEL = "anthropic:claude-haiku-4-5"


def costly(team: FakeTeam) -> FunctionModel:
    """The team's answers, each reporting 300 input and 50 output tokens (350 a call)."""

    def answer(request: ModelRequest) -> ModelResponse:
        response = to_response(team(request), request, MODEL)
        return dataclasses.replace(response, usage=Usage(input_tokens=300, output_tokens=50))

    return FunctionModel(answer)


async def test_the_turn_after_the_limit_raises_before_any_model_call(
    team: FakeTeam, any_url: str
) -> None:
    limit = SpendLimit(tokens=2000, per="user", window="1d")
    first = Orchestrator(categories(), model=costly(team), store=any_url, spend_limit=limit)
    second = Orchestrator(categories(), model=costly(team), store=any_url, spend_limit=limit)
    for n in range(3):  # 2 calls (triage, response) of 350 tokens a turn: 2100 after 3.
        orch = first if n % 2 == 0 else second  # Two processes' worth: one count.
        await orch.handle(f"c-{n}", "hello", user_id="alice")
    calls = len(team.calls)
    with pytest.raises(SpendLimitReached) as reached:
        await second.handle("c-9", "hello again", user_id="alice")
    assert len(team.calls) == calls  # No model call at all.
    assert reached.value.tokens == 2100 and reached.value.user_id == "alice"
    assert 0 < reached.value.retry_after <= timedelta(days=1).total_seconds()
    kept = await second.transcript("c-9", user_id="alice")
    assert [m.content for m in kept][0] == "hello again"  # The message is stored.
    # Another user is not limited by alice's spend.
    await second.handle("c-b", "hello", user_id="bob")
    await first.aclose()
    await second.aclose()


async def test_a_cost_limit_and_a_per_conversation_limit(team: FakeTeam, db_url: str) -> None:
    limit = SpendLimit(cost_usd=0.0001, per="conversation", window="1h")
    orch = Orchestrator(categories(), model=costly(team), store=db_url, spend_limit=limit)
    await orch.handle("c-1", "hello", user_id="alice")  # Haiku list price: about $0.0007.
    with pytest.raises(SpendLimitReached) as reached:
        await orch.handle("c-1", "hello", user_id="alice")
    await orch.handle("c-2", "hello", user_id="alice")  # Another conversation: its own count.
    await orch.aclose()
    assert reached.value.cost_usd > 0.0001


def test_bad_spend_limits_are_refused() -> None:
    with pytest.raises(ConfigError, match="needs tokens= or cost_usd="):
        SpendLimit()
    with pytest.raises(ConfigError, match="window"):
        SpendLimit(tokens=10, window="a day")
    with pytest.raises(ConfigError, match="per must be"):
        SpendLimit(tokens=10, per="team")  # type: ignore[arg-type]
    assert SpendLimit(tokens=1, window="12h").span == timedelta(hours=12)


def background_heavy(team: FakeTeam) -> FunctionModel:
    """The team's answers; a turn's experts report 1 token a call, the summariser's and
    the memory expert's calls 3,000."""

    def answer(request: ModelRequest) -> ModelResponse:
        response = to_response(team(request), request, MODEL)
        heavy = request.expert in ("summariser", "memory")
        usage = Usage(input_tokens=2900, output_tokens=100) if heavy else Usage(input_tokens=1)
        return dataclasses.replace(response, usage=usage)

    return FunctionModel(answer)


async def test_the_memory_experts_spend_counts(team: FakeTeam, any_url: str) -> None:
    limit = SpendLimit(tokens=2000, per="user", window="1d")
    orch = Orchestrator(
        categories(), model=background_heavy(team), store=any_url, spend_limit=limit
    )
    try:
        await orch.handle("c-1", "I live in Pune and I prefer Hindi", user_id="alice")
        await orch.drain()  # The memory expert learnt from it: 3,000 tokens.
        assert [c.expert for c in team.calls].count("memory") == 1
        calls = len(team.calls)
        with pytest.raises(SpendLimitReached) as reached:
            await orch.handle("c-2", "hello", user_id="alice")
        assert len(team.calls) == calls
        assert reached.value.tokens >= 3000
    finally:
        await orch.aclose()


async def test_the_summarisers_spend_counts(team: FakeTeam, any_url: str) -> None:
    from frontdesk.threads.compaction import CompactionPolicy

    limit = SpendLimit(tokens=2000, per="conversation", window="1d")
    orch = Orchestrator(
        categories(), model=background_heavy(team), store=any_url, spend_limit=limit, memory=False
    )
    orch.compaction_policy = CompactionPolicy(threshold=1, keep_exchanges=1)
    try:
        await orch.handle("c-1", "hello there", user_id="alice")
        await orch.handle("c-1", "and hello again", user_id="alice")
        await orch.drain()  # The thread passed its threshold: compacted, 3,000 tokens.
        assert [c.expert for c in team.calls].count("summariser") >= 1
        with pytest.raises(SpendLimitReached) as reached:
            await orch.handle("c-1", "hello once more", user_id="alice")
        assert reached.value.tokens >= 3000
        await orch.handle("c-2", "hello", user_id="alice")  # Per conversation: c-2 is free.
    finally:
        await orch.aclose()


async def test_a_failed_summary_was_paid_for_too(team: FakeTeam, any_url: str) -> None:
    from frontdesk.threads.compaction import CompactionPolicy

    limit = SpendLimit(tokens=2000, per="conversation", window="1d")
    orch = Orchestrator(
        categories(), model=background_heavy(team), store=any_url, spend_limit=limit, memory=False
    )
    orch.compaction_policy = CompactionPolicy(threshold=1, keep_exchanges=1)
    team.summarise = lambda r: ""  # An empty summary is refused: the compaction fails.
    try:
        await orch.handle("c-1", "hello there", user_id="alice")
        await orch.handle("c-1", "and hello again", user_id="alice")
        await orch.drain()
        assert orch.audit_log is not None
        kinds = [e.kind for e in await orch.audit_log.events("c-1")]
        assert "compaction_failed" in kinds and "compaction" not in kinds
        with pytest.raises(SpendLimitReached):
            await orch.handle("c-1", "hello once more", user_id="alice")
    finally:
        await orch.aclose()
