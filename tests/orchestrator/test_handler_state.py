"""Handler state in its scopes, through `Orchestrator.handle`: per conversation, per user, and
shared by named categories; on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.examples.potato_shop import build
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio


class Ask(BaseModel):
    """What the fake request expert extracts: an action on a value."""

    action: Literal["put", "get", "delete"]
    value: str | None = None


async def _act(scope: Any, request: Ask) -> Outcome:
    """Put, get or delete the key `value` in `scope`; the result goes in the outcome's data."""
    if request.action == "put":
        await scope.put("value", request.value)
        return Outcome(instruction="Say it is kept.", data={"put": request.value})
    if request.action == "delete":
        return Outcome(instruction="Say it is gone.", data={"deleted": await scope.delete("value")})
    return Outcome(instruction="Say what it is.", data={"got": await scope.get("value")})


def _category(name: str, scope: Any) -> Category:
    async def handler(request: Ask, context: HandlerContext) -> Outcome:
        return await _act(scope(context), request)

    return Category(name=name, description=f"{name} things", request=Ask, handler=handler)


class Desk:
    """An Orchestrator whose fake team routes to the category and action each turn names."""

    def __init__(self, team: FakeTeam, url: str, categories: list[Category]) -> None:
        self.next: tuple[str, dict[str, Any]] = ("OTHER", {})
        team.route = lambda r: self.next[0]
        team.extract = lambda r: {"request": self.next[1]}
        self.orch = Orchestrator(categories, model=team.model(), store=url)

    async def ask(
        self, conversation: str, category: str, user: str | None = None, **request: Any
    ) -> dict[str, Any]:
        self.next = (category, request)
        reply = await self.orch.handle(conversation, f"{category} {request}", user_id=user)
        assert reply.category == category and reply.outcome is not None
        return reply.outcome.data


async def test_conversation_b_does_not_see_the_ticket_of_conversation_a(
    team: FakeTeam, any_url: str
) -> None:
    tickets = _category("TICKETS", lambda c: c.state.conversation)
    legacy = _category("LEGACY", lambda c: c.store)  # The everyone scope, as `store` was.
    desk = Desk(team, any_url, [tickets, legacy])
    try:
        await desk.ask("a", "TICKETS", "ann", action="put", value="router broken")
        await desk.ask("a", "LEGACY", "ann", action="put", value="router broken")
        in_b = await desk.ask("b", "TICKETS", "ann", action="get")  # Ann's other conversation.
        of_nobody = await desk.ask("n", "TICKETS", action="get")
        in_a = await desk.ask("a", "TICKETS", "ann", action="get")
        everyone = await desk.ask("n", "LEGACY", action="get")
    finally:
        await desk.orch.aclose()
    assert in_b == {"got": None} and of_nobody == {"got": None}
    assert in_a == {"got": "router broken"}
    assert everyone == {"got": "router broken"}


async def test_user_state_follows_the_user_and_not_to_other_users(
    team: FakeTeam, any_url: str
) -> None:
    plan = _category("PLAN", lambda c: c.state.user)
    desk = Desk(team, any_url, [plan])
    try:
        await desk.ask("ann-1", "PLAN", "ann", action="put", value="fibre 500")
        later = await desk.ask("ann-2", "PLAN", "ann", action="get")
        bobs = await desk.ask("bob-1", "PLAN", "bob", action="get")
        await desk.ask("bob-1", "PLAN", "bob", action="put", value="copper")
        still = await desk.ask("ann-3", "PLAN", "ann", action="get")
    finally:
        await desk.orch.aclose()
    assert later == {"got": "fibre 500"}
    assert bobs == {"got": None}
    assert still == {"got": "fibre 500"}


async def test_two_categories_naming_one_namespace_share_it(team: FakeTeam, any_url: str) -> None:
    place = _category("PLACE", lambda c: c.state.shared("shop").user)
    status = _category("STATUS", lambda c: c.state.shared("shop").user)
    own = _category("OWN", lambda c: c.state.user)  # Its own namespace: not the shop's.
    other = _category("OTHER_SHOP", lambda c: c.state.shared("another shop").user)
    desk = Desk(team, any_url, [place, status, own, other])
    try:
        await desk.ask("c-1", "PLACE", "ann", action="put", value="order 10001")
        seen = await desk.ask("c-2", "STATUS", "ann", action="get")
        not_own = await desk.ask("c-2", "OWN", "ann", action="get")
        not_other = await desk.ask("c-2", "OTHER_SHOP", "ann", action="get")
        not_bobs = await desk.ask("c-3", "STATUS", "bob", action="get")
    finally:
        await desk.orch.aclose()
    assert seen == {"got": "order 10001"}
    assert not_own == not_other == not_bobs == {"got": None}


async def test_delete_through_a_handler_removes_the_value(team: FakeTeam, any_url: str) -> None:
    tickets = _category("TICKETS", lambda c: c.state.conversation)
    desk = Desk(team, any_url, [tickets])
    try:
        await desk.ask("a", "TICKETS", "ann", action="put", value="router broken")
        first = await desk.ask("a", "TICKETS", "ann", action="delete")
        again = await desk.ask("a", "TICKETS", "ann", action="delete")
        gone = await desk.ask("a", "TICKETS", "ann", action="get")
        state = desk.orch.store.handler_state("TICKETS", conversation_id="a", user_id="ann")
        left = await state.conversation.items()
    finally:
        await desk.orch.aclose()
    assert first == {"deleted": True} and again == {"deleted": False}
    assert gone == {"got": None} and left == []


async def test_the_user_scope_in_single_user_mode_is_a_handler_error_that_says_why(
    team: FakeTeam, db_url: str
) -> None:
    plan = _category("PLAN", lambda c: c.state.user)
    desk = Desk(team, db_url, [plan])
    try:
        desk.next = ("PLAN", {"action": "put", "value": "fibre"})
        reply = await desk.orch.handle("solo", "PLAN put fibre")  # No user id.
        log = desk.orch.audit_log
        assert log is not None
        errors = [e.payload for e in await log.events("solo") if e.kind == "handler_error"]
    finally:
        await desk.orch.aclose()
    assert reply.handler_failed and reply.outcome is not None and reply.outcome.data == {}
    assert len(errors) == 1 and errors[0]["error"].startswith("UserStateUnavailable: PLAN:")
    assert "needs a user id" in errors[0]["error"]


async def _place(orch: Orchestrator, conversation: str, user_id: str) -> str:
    await orch.handle(conversation, "I'd like two bags of purple potatoes", user_id=user_id)
    placed = await orch.handle(conversation, "yes, confirm", user_id=user_id)
    assert placed.outcome is not None
    number: str = placed.outcome.data["order_number"]
    return number


async def test_the_shops_order_status_shows_only_the_customers_own_orders(any_url: str) -> None:
    orch = build(model="offline", store=any_url)
    try:
        number = await _place(orch, "ann-1", "ann")
        mine = await orch.handle("ann-2", f"What is the status of order {number}?", user_id="ann")
        bobs = await orch.handle("bob-1", f"What is the status of order {number}?", user_id="bob")
        refund = await orch.handle(
            "bob-1", f"Please refund the delivery fee for order {number}", user_id="bob"
        )
        sample = await orch.handle("bob-1", "Where is my order 77120?", user_id="bob")
        shop = orch.store.handler_state("potato_shop", conversation_id="ann-1", user_id="ann")
        anns = await shop.user.items("order:")
        pending = await orch.store.handler_state(
            "ORDERS", conversation_id="ann-1", user_id="ann"
        ).conversation.get("pending", "deleted")
    finally:
        await orch.aclose()
    assert mine.outcome is not None and mine.outcome.data["status"] == "being packed"
    assert bobs.category == "ORDER_STATUS" and refund.category == "REFUND"
    assert bobs.outcome is not None and "cannot find" in bobs.outcome.instruction
    assert refund.outcome is not None and "cannot find" in refund.outcome.instruction
    assert sample.outcome is not None and sample.outcome.data["order_number"] == "77120"
    assert [key for key, _ in anns] == [f"order:{number}"]
    assert pending == "deleted"  # Placed: the waiting order is deleted, not set to null.
