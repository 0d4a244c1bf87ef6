"""PostgreSQL's one-call start and finish (revision 0031, `threads/_server_turn.py`) keep
the general path's guarantees: a stale audit head, a lost lease, another process's turns
in between each leave the records as the general path leaves them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import sqlalchemy as sa
from pydantic import BaseModel
from sqlalchemy import Connection

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.errors import LeaseLost
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.threads import _outcomes, _server_turn
from frontdesk.threads.store import TurnOutcome

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


class Refund(BaseModel):
    order_id: str


async def refund(request: BaseModel, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Say the refund is on its way.")


BILLING = Category(
    name="BILLING",
    description="Refunds",
    request=Refund,
    handler=refund,
    examples=["refund my order"],
)


def model(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "BILLING", "reason": "test"}
    if request.expert == "request":
        return {"request": {"order_id": "A-1"}}
    return "The refund is on its way."


def orchestrator(url: str) -> Orchestrator:
    return Orchestrator([BILLING], model=FunctionModel(model), store=url, memory=False)


async def test_two_processes_taking_turns_keep_one_verified_chain(fresh_pg_url: str) -> None:
    """Each orchestrator's remembered audit head goes stale when the other one answers:
    the finish's call refuses the batch (nothing kept) and the general finish writes it."""
    one, two = orchestrator(fresh_pg_url), orchestrator(fresh_pg_url)
    calls: list[str] = []
    real = _server_turn.finish

    def counted(*args: Any, **kwargs: Any) -> bool:
        try:
            held = real(*args, **kwargs)
        except _server_turn.Fallback:
            calls.append("refused")
            raise
        calls.append("done")
        return held

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_server_turn, "finish", counted)
            for i in range(6):
                orch = one if i % 2 == 0 else two
                await orch.handle("c", f"refund order A-{i}", client_message_id=f"m-{i}")
            for i in range(6, 9):  # One process alone again: its head stays its own.
                await one.handle("c", f"refund order A-{i}", client_message_id=f"m-{i}")
        log = one.audit_log
        assert log is not None
        assert (await log.verify("c")).ok
        path = await one.store.path((await one.store.active_leaf("c")).id)  # type: ignore[union-attr]
    finally:
        await one.aclose()
        await two.aclose()
    assert [m.role for m in path] == ["user", "assistant"] * 9
    assert "refused" in calls  # A head moved by the other process was caught.
    assert calls[-2:] == ["done", "done"]  # Alone again: one call each.


async def test_a_finish_whose_lease_was_taken_over_writes_nothing(fresh_pg_url: str) -> None:
    orch = orchestrator(fresh_pg_url)
    try:
        await orch.handle("c", "refund order A-0", client_message_id="m-0")
        await orch.handle("c", "refund order A-1", client_message_id="m-1")
        store = orch.store
        lease = store.turn_lease("c")
        begun = await store.start_turn(
            "c", "refund order A-2", lease=lease, client_message_id="m-2"
        )
        assert lease.token is not None
        lease.token -= 1  # As if another owner had taken it over since, and given it back.
        reply = store.stage_reply(begun.message, "late")
        with pytest.raises(LeaseLost):
            await store.finish_turn(lease, reply)
        await lease.aclose()
        leaf = await store.active_leaf("c")
    finally:
        await orch.aclose()
    assert leaf is not None and leaf.id == begun.message.id  # The late reply is nowhere.


async def test_the_finish_call_refuses_an_outcome_that_hands_off(fresh_pg_url: str) -> None:
    """The function cannot open a hand-off: given an outcome that carries one (a later
    request of the message handed off after the first step was stored), it keeps nothing,
    and the store's general finish stores the hand-off and opens it, once."""
    orch = orchestrator(fresh_pg_url)
    try:
        await orch.handle("c", "refund order A-0", client_message_id="m-0")
        store = orch.store
        lease = store.turn_lease("c")
        begun = await store.start_turn("c", "refund A-1, and more", lease=lease)
        first = TurnOutcome(
            user_message_id=begun.message.id,
            conversation_id="c",
            category="BILLING",
            request={"order_id": "A-1"},
            instruction="Say the refund is on its way.",
            handler_ran=True,
        )
        await store.save_outcome(first, lease=lease)
        later = dataclasses.replace(first, handoff="the second request needs a person")
        reply = store.stage_reply(begun.message, "A person will look.")
        fence = lease.fence_params()

        def call(conn: Connection) -> bool:
            values = _outcomes.row_values(later)
            return _server_turn.finish(conn, fence, reply=reply, outcome=values, audit=None)

        async with store.engine.connect() as conn:
            with pytest.raises(_server_turn.Fallback, match="hands off"):
                await conn.run_sync(call)
        kept = await store.turn_record(begun.message.id)
        assert kept.reply is None and kept.outcome is not None and kept.outcome.handoff is None
        finished = await store.finish_turn(lease, reply, outcome=later)
        current = await store.handoffs.current("c")
    finally:
        await orch.aclose()
    assert finished.opened is not None and finished.opened.created
    assert current is not None and current.id == finished.opened.handoff.id


async def test_a_process_before_revision_0038_still_starts_its_turns(fresh_pg_url: str) -> None:
    """A rolling upgrade: the start of revision 0031 (thirteen arguments, no known path)
    stays beside the new one, and still takes the lease, adds the message and walks the
    path."""
    orch = orchestrator(fresh_pg_url)
    try:
        await orch.handle("c", "refund order A-0", client_message_id="m-0")
        store = orch.store
        lease = store.turn_lease("c")
        claim = lease.claim()
        call = (
            "SELECT (r.m).content AS content, r.lease_token AS token FROM frontdesk_start_turn("
            ":lease_name, :lease_owner, :lease_expires, :lease_now, 'm-old', 'c', 'old client', "
            "now(), 3, 'old-1', NULL, NULL, false) AS r"
        )

        async with store.engine.begin() as conn:
            rows = (await conn.execute(sa.text(call), claim)).all()
    finally:
        await orch.aclose()
    assert [r.content for r in rows] == [
        "refund order A-0",
        "The refund is on its way.",
        "old client",
    ]
    assert all(r.token == rows[-1].token for r in rows)
