"""A message with several requests whose turn fails between two handlers, then is retried
with the same client message id: every step's handler runs exactly once (a step whose
outcome is stored never again), and the reply covers every request."""

from __future__ import annotations

from typing import Any

import pytest

from frontdesk import Orchestrator
from frontdesk.errors import ModelConnectionError, TurnFailed
from frontdesk.experts.providers import FunctionModel, ModelRequest
from tests.orchestrator._desk import Desk, two_requests, with_the_finish_down
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio

TEXT = "Freeze my card and tell me my balance"


class TwoRequests(FakeTeam):
    """Triage finds both requests; the request expert for the balance can be made to fail
    (a provider outage after the first handler ran and its outcome was stored)."""

    def __init__(self) -> None:
        super().__init__(triage=two_requests, extract=self.extract_or_fail)
        self.balance_down = False

    def extract_or_fail(self, request: ModelRequest) -> dict[str, Any]:
        if self.balance_down and "Balance" in str(request.output_type):
            raise ModelConnectionError("provider down", model="function")
        return {"request": {}}


def ran(desk: Desk) -> list[tuple[str, str]]:
    return [(name, context.idempotency_key) for name, _, context in desk.ran]


async def test_a_retry_after_a_failure_between_two_handlers_runs_only_the_second(
    any_url: str,
) -> None:
    desk, team = Desk(), TwoRequests()
    orch = Orchestrator(desk.categories(), model=FunctionModel(team), store=any_url)
    team.balance_down = True
    with pytest.raises(TurnFailed):
        await orch.handle("c", TEXT, client_message_id="m-1")
    assert [name for name, _ in ran(desk)] == ["CARD_FREEZE"]  # Stored before step 2 failed.
    team.balance_down = False
    reply = await orch.handle("c", TEXT, client_message_id="m-1")
    again = await orch.handle("c", TEXT, client_message_id="m-1")
    await orch.aclose()
    names = [name for name, _ in ran(desk)]
    assert names == ["CARD_FREEZE", "BALANCE"]  # Step 1 never again, step 2 once.
    assert len({key for _, key in ran(desk)}) == 2
    instruction = team.of("response")[-1].messages[-1]["content"]
    assert "CARD_FREEZE is done" in instruction and "BALANCE is done" in instruction
    assert reply.categories == ["CARD_FREEZE", "BALANCE"] and not reply.replayed
    assert reply.outcome is not None and "BALANCE is done" in reply.outcome.instruction
    assert again.replayed and again.outcome == reply.outcome


async def test_a_retry_after_every_step_was_stored_runs_no_handler_and_covers_both(
    any_url: str,
) -> None:
    desk, team = Desk(), TwoRequests()
    orch = Orchestrator(desk.categories(), model=FunctionModel(team), store=any_url)
    await orch.open()
    await with_the_finish_down(orch, TEXT, "m-1")
    responses = len(team.of("response"))
    reply = await orch.handle("c", TEXT, client_message_id="m-1")
    regenerated = await orch.regenerate(reply.message_id)
    await orch.aclose()
    assert [name for name, _ in ran(desk)] == ["CARD_FREEZE", "BALANCE"]
    for request in team.of("response")[responses:]:  # The retry's and the regeneration's.
        instruction = request.messages[-1]["content"]
        assert "CARD_FREEZE is done" in instruction and "BALANCE is done" in instruction
    assert regenerated.categories == ["CARD_FREEZE", "BALANCE"]
