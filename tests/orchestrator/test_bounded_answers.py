"""Bounded answers: an answer over `max_tokens` x 8 characters (an endpoint that ignores
`max_tokens`) is asked for once more, then refused; it is never stored."""

from __future__ import annotations

import pytest

from frontdesk import Orchestrator
from frontdesk.errors import TurnFailed
from frontdesk.examples import bank
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import ModelRequest
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio

HUGE = "x" * 100_000  # 100 KB, far over max_tokens x 8 characters.


class Flooding(FakeTeam):
    """The response expert answers 100 KB for its first `floods` calls."""

    floods: int = 1

    def reply_for(self, request: ModelRequest) -> str:
        if len(self.of("response")) <= self.floods:
            return HUGE
        return "a reply of a sensible size"


async def test_an_oversized_reply_is_asked_for_again(db_url: str) -> None:
    team = Flooding()
    orch = Orchestrator(categories(), model=team.model(), store=db_url)
    reply = await orch.handle("c", "hello")
    await orch.aclose()
    assert reply.text == "a reply of a sensible size" and len(team.of("response")) == 2


async def test_an_oversized_reply_twice_fails_the_turn_and_stores_nothing_of_it(
    db_url: str,
) -> None:
    team = Flooding()
    team.floods = 99
    orch = Orchestrator(categories(), model=team.model(), store=db_url)
    with pytest.raises(TurnFailed) as failed:
        await orch.handle("c", "hello")
    path = await orch.transcript("c")
    await orch.aclose()
    assert failed.value.stage == "response" and "characters, over" in str(failed.value)
    assert len(team.of("response")) == 2
    assert all(HUGE not in m.content for m in path) and path[0].content == "hello"


async def test_an_oversized_request_is_not_acted_on(db_url: str) -> None:
    team = FakeTeam()
    team.route = lambda r: "TRANSFER"
    request = {"amount": "50", "account_number": "12345678", "reference": HUGE}
    team.extract = lambda r: {"request": request}
    orch = bank.build(model=team.model(), store=db_url)
    reply = await orch.handle("c", "send 50 to 12345678")
    state = orch.store.handler_state("TRANSFER", conversation_id="c", user_id=None)
    sent = await state.conversation.items("transfer:")
    await orch.aclose()
    # Unusable: the customer is asked again (on_unreadable="ask"), never the handler run.
    assert reply.request is None and not reply.awaiting_confirmation and sent == []
    assert len(team.of("request")) == 2
