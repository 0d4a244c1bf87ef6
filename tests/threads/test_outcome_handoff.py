"""A turn's outcome stored again with a hand-off it did not have (a later request of a
message with several handed off after the first step was stored): the store keeps the
hand-off and opens it, once, whether the re-save or the turn's finish carries it; a
hand-off stored is never replaced nor cleared by a save without one."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from frontdesk.threads.store import ConversationStore, TurnOutcome

pytestmark = pytest.mark.anyio

WHY = "the balance needs a person"


def conv() -> str:
    return f"conv-{uuid.uuid4().hex[:12]}"


def first_step(question: str, conversation_id: str) -> TurnOutcome:
    """The first step's outcome, stored once its handler ran: no hand-off."""
    return TurnOutcome(
        user_message_id=question,
        conversation_id=conversation_id,
        category="CARD_FREEZE",
        request={"card": "debit"},
        instruction="Say the card is frozen.",
        handler_ran=True,
        flow={"categories": ["CARD_FREEZE", "BALANCE"]},
    )


async def test_a_re_save_with_a_later_step_s_handoff_opens_it_once(
    store: ConversationStore,
) -> None:
    c = conv()
    lease = store.turn_lease(c, ttl=30)
    start = await store.start_turn(c, "freeze my card and my balance", lease=lease)
    stored = first_step(start.message.id, c)
    assert await store.save_outcome(stored, lease=lease) is None
    steps = {"categories": ["CARD_FREEZE", "BALANCE"], "steps": [{"category": "BALANCE"}]}
    later = dataclasses.replace(stored, handoff=WHY, flow=steps)
    opened = await store.save_outcome(later, lease=lease)
    assert opened is not None and opened.created and opened.handoff.reason == WHY
    # Stored again (a retry), with another reason or none (a usage update): nothing more.
    for again in ("other", None):
        resaved = dataclasses.replace(later, handoff=again)
        assert await store.save_outcome(resaved, lease=lease) is None
    finished = await store.finish_turn(
        lease, store.stage_reply(start.message, "A person will look."), outcome=later
    )
    assert finished.opened is None
    record = (await store.turn_record(start.message.id)).outcome
    assert record is not None and record.handoff == WHY and record.flow == steps
    current = await store.handoffs.current(c)
    assert current is not None and current.id == opened.handoff.id and current.reason == WHY


async def test_the_finish_opens_a_handoff_the_stored_outcome_lacked(
    store: ConversationStore,
) -> None:
    """A later request that hands off without its handler running (it could not be read):
    nothing stores the step, the turn's finish carries the hand-off."""
    c = conv()
    lease = store.turn_lease(c, ttl=30)
    start = await store.start_turn(c, "freeze my card and my balance", lease=lease)
    stored = first_step(start.message.id, c)
    await store.save_outcome(stored, lease=lease)
    assert await store.handoffs.current(c) is None
    later = dataclasses.replace(stored, handoff=WHY, usage={"response": {"input_tokens": 5}})
    finished = await store.finish_turn(
        lease, store.stage_reply(start.message, "A person will look."), outcome=later
    )
    assert finished.opened is not None and finished.opened.created
    record = (await store.turn_record(start.message.id)).outcome
    assert record is not None and record.handoff == WHY
    assert record.usage == {"response": {"input_tokens": 5}}
    current = await store.handoffs.current(c)
    assert current is not None and current.id == finished.opened.handoff.id
