"""`frontdesk.testing.handler_context`: a handler unit test needs no orchestrator."""

from __future__ import annotations

import pytest

from frontdesk import HandlerContext
from frontdesk.errors import InvalidInput, UserError, UserStateUnavailable
from frontdesk.examples.bank import BalanceRequest as Balance
from frontdesk.examples.bank import FreezeCardRequest as FreezeCard
from frontdesk.examples.bank import balance, freeze_card
from frontdesk.testing import RecordingMemory, handler_context

pytestmark = pytest.mark.anyio


async def test_a_handler_runs_on_a_real_context_with_state_in_memory() -> None:
    context = handler_context(user_id="alice", category="CARD_FREEZE")
    assert isinstance(context, HandlerContext)
    first = await freeze_card(FreezeCard(last_four="4242"), context)
    second = await freeze_card(FreezeCard(last_four="4242"), context)
    assert first.data == {"frozen": "4242", "already": False}
    assert second.data == {"frozen": "4242", "already": True}
    assert await context.state.user.items() == [("frozen:4242", {"turn": context.idempotency_key})]


async def test_scopes_are_apart_and_shared_namespaces_meet() -> None:
    context = handler_context(user_id="alice", category="A")
    await context.state.conversation.put("k", 1)
    await context.state.user.put("k", 2)
    await context.state.everyone.put("k", 3)
    assert [await s.get("k") for s in (context.state.conversation, context.state.user)] == [1, 2]
    assert await context.store.get("k") == 3  # `store` is the everyone scope.
    await context.state.shared("bank").user.put("orders", ["o-1"])
    assert await context.state.shared("bank").user.get("orders") == ["o-1"]
    assert await context.state.user.get("orders") is None  # Another namespace.
    assert await context.state.user.shared("bank").get("orders") == ["o-1"]
    assert await context.state.conversation.delete("k") is True
    assert await context.state.conversation.delete("k") is False


async def test_values_are_stored_as_json_with_the_real_stores_checks() -> None:
    context = handler_context()
    value = {"items": [1]}
    await context.state.user.put("v", value)
    value["items"].append(2)  # A later change to the object does not change what is stored.
    assert await context.state.user.get("v") == {"items": [1]}
    with pytest.raises(InvalidInput, match="JSON"):
        await context.state.user.put("s", {1, 2})
    with pytest.raises(InvalidInput):
        await context.state.user.put("", 1)


async def test_single_user_mode_has_no_user_scope_and_no_memory() -> None:
    context = handler_context(user_id=None)
    with pytest.raises(UserStateUnavailable):
        _ = context.state.user
    with pytest.raises(UserError, match="user_id"):
        await context.memory.remember("x")
    assert await context.memory.recall() == []


async def test_memory_records_remember_and_answers_recall_newest_first() -> None:
    context = handler_context(user_id="alice")
    await context.memory.remember("Earns 40k a year", key="income")
    await context.memory.remember("Has two children")
    await context.memory.remember("Earns 55k a year", key="income")
    assert [m.text for m in await context.memory.recall()] == [
        "Earns 55k a year",
        "Has two children",
    ]
    assert isinstance(context.memory, RecordingMemory)
    assert [m.text for m in context.memory.written][0] == "Earns 40k a year"
    outcome = await balance(Balance(account="current"), context)
    assert outcome.data == {
        "amount": "1234.50",
        "facts": ["Earns 55k a year", "Has two children"],
    }


def test_the_idempotency_key_is_stable_and_extras_are_passed() -> None:
    a = handler_context(conversation_id="c-1", bank="client")
    b = handler_context(conversation_id="c-1")
    c = handler_context(conversation_id="c-2")
    assert a.idempotency_key == b.idempotency_key != c.idempotency_key
    assert len(a.idempotency_key) == 32 and int(a.idempotency_key, 16) >= 0
    assert a.extras == {"bank": "client"} and b.extras == {}
    assert (a.user_id, a.conversation_id, a.category) == ("test-user", "c-1", "TEST")


async def test_handler_context_names_the_fields_filled_from_memory() -> None:
    context = handler_context(from_memory=["from_account"])
    assert context.from_memory == frozenset({"from_account"})
    assert handler_context().from_memory == frozenset()
    fact = await context.memory.remember("Prefers email")
    assert fact.trust == "verified"  # A handler's write is the business's record.
