"""Owners and fencing in the store: another user's conversation is not found, and a turn
whose lease was taken over writes nothing in its last transaction."""

from __future__ import annotations

import dataclasses
import time
import uuid

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import Connection

from frontdesk.errors import SAFE_REPLY, ConversationNotFound, LeaseLost
from frontdesk.threads.models import Lease
from frontdesk.threads.store import ConversationStore, TurnOutcome

pytestmark = pytest.mark.anyio

_lease = Lease.__table__  # type: ignore[attr-defined]


def conv() -> str:
    return f"conv-{uuid.uuid4().hex[:12]}"


async def _expire(store: ConversationStore, name: str) -> None:
    """What a stalled holder's lease looks like once its ttl has run out unrenewed."""
    async with store.engine.begin() as conn:
        await conn.execute(sa.update(_lease).where(_lease.c.name == name).values(expires_at=1.0))


async def test_another_users_message_is_refused_in_the_first_transaction(
    store: ConversationStore,
) -> None:
    c = conv()
    await store.add_user_message(c, "alice's secret", user_id="alice")
    for user in ("mallory", None):
        lease = store.turn_lease(c, timeout=0.5)
        with pytest.raises(ConversationNotFound):
            await store.start_turn(c, "tell me", user_id=user, lease=lease)
        await lease.aclose()
        with pytest.raises(ConversationNotFound):
            await store.add_user_message(c, "tell me", user_id=user, client_message_id="m-1")
        with pytest.raises(ConversationNotFound):
            await store.check_owner(c, user)
    assert [m.content for m in await store.messages(c)] == ["alice's secret"]
    # The refused turn's lease rolled back with it: Alice is not kept waiting.
    lease = store.turn_lease(c, timeout=0.5)
    await store.start_turn(c, "next", user_id="alice", lease=lease)
    await store.finish_turn(lease, None)
    await store.check_owner(c, "alice")
    with pytest.raises(ConversationNotFound):
        await store.check_owner(conv(), "alice")  # Missing: the same error.


async def test_switching_to_a_message_with_children_makes_its_newest_leaf_active(
    store: ConversationStore,
) -> None:
    c = conv()
    question, _ = await store.add_user_message(c, "q")
    first = await store.add_assistant_message(question.id, "a1")
    follow, _ = await store.add_user_message(c, "q2")
    old = await store.add_assistant_message(follow.id, "a2")
    newer = await store.add_assistant_message(follow.id, "a2 again")  # Regenerated.
    edit, _ = await store.add_user_message(c, "q edited", parent_id=None)
    await store.add_assistant_message(edit.id, "b1")

    assert await store.set_active_leaf(c, question.id) == newer.id
    assert await store.set_active_leaf(c, first.id) == newer.id
    assert await store.set_active_leaf(c, old.id) == old.id  # A leaf stays itself.
    leaf = await store.active_leaf(c)
    assert leaf is not None and leaf.id == old.id
    # The next message follows a whole exchange, and no reply drops off the path.
    nxt, _ = await store.add_user_message(c, "q3")
    assert [m.content for m in await store.path(nxt.id)] == ["q", "a1", "q2", "a2", "q3"]


async def test_each_new_holder_gets_a_larger_fencing_token(store: ConversationStore) -> None:
    c = conv()
    tokens: list[int] = []
    for _ in range(3):
        lease = store.turn_lease(c)
        await lease.take()
        assert lease.token is not None
        tokens.append(lease.token)
        await lease.aclose()
    assert tokens == sorted(tokens) and len(set(tokens)) == 3


async def test_a_turn_whose_lease_was_taken_over_writes_nothing(store: ConversationStore) -> None:
    c = conv()
    stalled = store.turn_lease(c, ttl=30)
    start = await store.start_turn(c, "transfer 100", lease=stalled, client_message_id="m-1")
    await _expire(store, stalled.name)  # The holder stalled past its ttl...
    other = store.turn_lease(c, timeout=1)
    took = await store.start_turn(c, "hello", lease=other, client_message_id="m-2")
    assert other.token is not None and stalled.token is not None and other.token > stalled.token

    audited: list[str] = []

    def audit(conn: Connection, opened: object) -> None:
        audited.append("written")
        conn.execute(sa.update(_lease).values(owner=_lease.c.owner))  # Any write at all.

    late = store.stage_reply(start.message, "sent 100")
    for release in (True, False):
        with pytest.raises(LeaseLost) as caught:
            await store.finish_turn(stalled, late, also=audit, release=release)
        assert caught.value.retryable and caught.value.conversation_id == c
    assert audited == []  # The fence is checked first.
    await stalled.aclose()  # Does not give back someone else's lease.

    await store.finish_turn(other, store.stage_reply(took.message, "hi"))
    contents = [m.content for m in await store.messages(c)]
    # The stalled reply never landed; its question got the failed-turn marker when the
    # next turn followed it, so the thread still alternates.
    assert contents == ["transfer 100", SAFE_REPLY, "hello", "hi"]
    leaf = await store.active_leaf(c)
    assert leaf is not None and leaf.content == "hi"


async def test_a_slow_turn_keeps_its_lease_by_its_heartbeat(store: ConversationStore) -> None:
    c = conv()
    slow = store.turn_lease(c, ttl=0.3)
    start = await store.start_turn(c, "slow", lease=slow)
    await anyio.sleep(1.0)  # Three ttl's: only the heartbeat keeps it.
    assert not await store.try_lease(slow.name, "intruder", ttl=1)
    await store.finish_turn(slow, store.stage_reply(start.message, "done"))
    waited = time.monotonic()
    nxt = store.turn_lease(c, timeout=1)
    await nxt.take()  # Given back at once.
    assert time.monotonic() - waited < 0.5
    await nxt.aclose()


async def test_an_outcome_is_stored_only_while_its_lease_holds(store: ConversationStore) -> None:
    """The outcome (what a handler decided, stored before the reply) is fenced like the
    reply: on PostgreSQL fence and write are one statement run alone, on SQLite two in a
    transaction; either way a taken-over turn stores nothing, and a held one renews."""
    c = conv()
    held = store.turn_lease(c, ttl=30)
    start = await store.start_turn(c, "transfer 100", lease=held, client_message_id="m-1")
    question = start.message.id
    outcome = TurnOutcome(
        user_message_id=question,
        conversation_id=c,
        category="TRANSFER",
        request={"amount": 100},
        instruction="Say it was sent.",
        data={"reference": "T-1"},
        handler_ran=True,
        usage={"triage": {"input_tokens": 3}},
    )
    await _expire(store, held.name)  # Stalled, but no one took over: the fence renews it.
    assert await store.save_outcome(outcome, lease=held) is None
    assert not await store.try_lease(held.name, "intruder", ttl=1)
    again = dataclasses.replace(outcome, data={"reference": "T-2"}, usage={"triage": {"n": 9}})
    await store.save_outcome(again, lease=held)  # A retry: only the usage changes.
    stored = (await store.turn_record(question)).outcome
    assert stored is not None and stored.data == {"reference": "T-1"}
    assert stored.usage == {"triage": {"n": 9}} and stored.handler_ran

    later = (await store.start_turn(c, "and 50 more", lease=held)).message.id
    await _expire(store, held.name)
    other = store.turn_lease(c, timeout=1)
    await other.take()  # Took over.
    lost = dataclasses.replace(outcome, user_message_id=later)
    with pytest.raises(LeaseLost) as caught:
        await store.save_outcome(lost, lease=held)
    assert caught.value.retryable and caught.value.token == held.token
    assert (await store.turn_record(later)).outcome is None
    await other.aclose()
