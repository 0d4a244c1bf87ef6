"""PostgreSQL's one-call start and finish (revision 0031, `threads/_server_turn.py`) keep
the general path's guarantees: a stale audit head, a lost lease, another process's turns
in between each leave the records as the general path leaves them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.errors import LeaseLost
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.threads import _server_turn

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
