"""A message with several requests whose later step hands off (its handler's
`Outcome(handoff=...)`, or the safe route of a request that cannot be read) after the
first step's outcome was stored: the hand-off opens, once, audited once, and an operator
finds it in the queue; on the first try and on a retry of the turn."""

from __future__ import annotations

from typing import Any

import pytest

from frontdesk import HandlerContext, Orchestrator, Outcome
from frontdesk.errors import ModelConnectionError, TurnFailed
from frontdesk.experts.providers import FunctionModel, ModelRequest
from tests.orchestrator._desk import Desk, two_requests, with_the_finish_down
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio

TEXT = "Freeze my card and tell me my balance"
WHY = "the balance needs a person: the account is under review"


class HandingOffDesk(Desk):
    """A card desk whose balance handler hands the conversation to a person."""

    def handler(self, name: str) -> Any:
        if name != "BALANCE":
            return super().handler(name)

        async def handle(request: Any, context: HandlerContext) -> Outcome:
            self.ran.append((name, request, context))
            return Outcome(instruction="Tell the customer a person will look.", handoff=WHY)

        return handle


class TwoRequests(FakeTeam):
    """Triage finds both requests; the balance's request expert can be made to fail (a
    provider outage) or to answer what no request can be read from."""

    def __init__(self) -> None:
        super().__init__(triage=two_requests, extract=self.extract_or_fail)
        self.balance_down = False
        self.balance_unreadable = False

    def extract_or_fail(self, request: ModelRequest) -> dict[str, Any]:
        if "Balance" in str(request.output_type):
            if self.balance_down:
                raise ModelConnectionError("provider down", model="function")
            if self.balance_unreadable:
                return {"request": {"account": ["not", "an", "account"]}}
        return {"request": {}}


def names(desk: Desk) -> list[str]:
    return [name for name, _, _ in desk.ran]


async def handed_off(orch: Orchestrator, conversation_id: str) -> list[dict[str, Any]]:
    """The conversation's `hand_off` audit events' payloads."""
    assert orch.audit_log is not None
    events = await orch.audit_log.events(conversation_id)
    return [e.payload for e in events if e.kind == "hand_off"]


async def check_one_handoff(orch: Orchestrator, reason: str) -> None:
    """One open hand-off of "c" for `reason`, in the queue, audited once."""
    queue = await orch.handoffs.queue()
    assert [(h.conversation_id, h.reason) for h in queue] == [("c", reason)]
    audited = await handed_off(orch, "c")
    assert [e["reason"] for e in audited] == [reason]
    current = await orch.store.handoffs.current("c")
    assert current is not None and audited[0]["handoff_id"] == current.id


async def test_the_second_handler_s_handoff_opens_once_audited_and_queued(any_url: str) -> None:
    desk, team = HandingOffDesk(), TwoRequests()
    orch = Orchestrator(desk.categories(), model=FunctionModel(team), store=any_url)
    reply = await orch.handle("c", TEXT, client_message_id="m-1")
    again = await orch.handle("c", TEXT, client_message_id="m-1")  # A replay opens nothing.
    assert reply.handoff and reply.categories == ["CARD_FREEZE", "BALANCE"]
    assert again.replayed and again.handoff
    assert names(desk) == ["CARD_FREEZE", "BALANCE"]
    await check_one_handoff(orch, WHY)
    # The person has the conversation: the next message waits for them, no handler runs.
    waiting = await orch.handle("c", "Hello?")
    await orch.aclose()
    assert waiting.handoff and names(desk) == ["CARD_FREEZE", "BALANCE"]


async def test_an_unreadable_second_request_hands_off_when_the_first_was_stored(
    any_url: str,
) -> None:
    desk, team = Desk(), TwoRequests()
    team.balance_unreadable = True
    orch = Orchestrator(
        desk.categories(), model=FunctionModel(team), store=any_url, on_unreadable="handoff"
    )
    reply = await orch.handle("c", TEXT, client_message_id="m-1")
    assert reply.handoff and names(desk) == ["CARD_FREEZE"]
    (queued,) = await orch.handoffs.queue()
    await check_one_handoff(orch, queued.reason)
    assert "BALANCE" in queued.reason
    await orch.aclose()


async def test_a_retry_after_a_failure_between_two_handlers_opens_the_second_s_handoff(
    any_url: str,
) -> None:
    desk, team = HandingOffDesk(), TwoRequests()
    orch = Orchestrator(desk.categories(), model=FunctionModel(team), store=any_url)
    team.balance_down = True
    with pytest.raises(TurnFailed):
        await orch.handle("c", TEXT, client_message_id="m-1")
    assert names(desk) == ["CARD_FREEZE"] and await orch.handoffs.queue() == []
    team.balance_down = False
    reply = await orch.handle("c", TEXT, client_message_id="m-1")
    assert reply.handoff and names(desk) == ["CARD_FREEZE", "BALANCE"]
    await check_one_handoff(orch, WHY)
    await orch.aclose()


async def test_a_retry_after_the_finish_failed_opens_the_handoff_no_second_time(
    any_url: str,
) -> None:
    desk, team = HandingOffDesk(), TwoRequests()
    orch = Orchestrator(desk.categories(), model=FunctionModel(team), store=any_url)
    await orch.open()
    await with_the_finish_down(orch, TEXT, "m-1")
    await check_one_handoff(orch, WHY)  # Opened with the step's outcome, before the reply.
    reply = await orch.handle("c", TEXT, client_message_id="m-1")
    assert reply.handoff and names(desk) == ["CARD_FREEZE", "BALANCE"]
    await check_one_handoff(orch, WHY)
    await orch.aclose()
