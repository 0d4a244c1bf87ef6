"""Review (`Orchestrator(review=True)`): each draft is checked before the customer sees it."""

from __future__ import annotations

from typing import Any

import pytest

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import ModelRequest
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio

FALLBACK = "Let me pass you to a colleague."


class Reviewed(FakeTeam):
    """The review expert answers `verdicts` in turn (then approves)."""

    verdicts: list[dict[str, Any]]

    def __call__(self, request: ModelRequest) -> Any:
        if request.expert == "review":
            self.calls.append(request)
            n = len(self.of("review"))
            return self.verdicts[n - 1] if n <= len(self.verdicts) else {"approved": True}
        return super().__call__(request)


def team_with(*verdicts: dict[str, Any]) -> Reviewed:
    team = Reviewed()
    team.verdicts = list(verdicts)
    return team


REJECT = {"approved": False, "note": "It states a fee the instruction does not give."}


async def test_two_rejected_drafts_send_the_fallback(db_url: str) -> None:
    team = team_with(REJECT, REJECT)
    orch = Orchestrator(
        categories(),
        model=team.model(),
        store=db_url,
        review=True,
        review_rules=["Never state a fee."],
        review_fallback=FALLBACK,
    )
    reply = await orch.handle("c", "hello", client_message_id="m-1")
    again = await orch.handle("c", "hello", client_message_id="m-1")
    assert orch.audit_log is not None
    rows = await orch.audit_log.events("c")
    await orch.aclose()
    assert reply.text == again.text == FALLBACK and reply.reviewed and again.reviewed
    verdicts = [r.payload for r in rows if r.kind == "review"]
    assert [(v["attempt"], v["approved"]) for v in verdicts] == [(1, False), (2, False)]
    assert len(team.of("response")) == 2 and len(team.of("review")) == 2
    second = team.of("response")[1].messages[-1]["content"]
    assert "It states a fee the instruction does not give." in second  # The note, redrafted.
    material = team.of("review")[0].messages[-1]["content"]
    assert "Never state a fee." in material and "Customer: hello" in material
    assert "review" in reply.usage and "review" in reply.models


async def test_a_rejected_draft_is_never_streamed(db_url: str) -> None:
    team = team_with(REJECT)
    orch = Orchestrator(categories(), model=team.model(), store=db_url, review=True)
    events = [e async for e in orch.stream("c", "hello")]
    await orch.aclose()
    deltas = [e.text for e in events if e.type == "delta"]
    assert deltas == ["reply #2"]  # The approved second draft, in one piece; never #1.


async def test_no_review_without_it_and_none_for_approved_wording(db_url: str) -> None:
    team = team_with()
    orch = Orchestrator(categories(), model=team.model(), store=db_url)
    plain = await orch.handle("c", "hello")
    await orch.aclose()
    assert not plain.reviewed and team.of("review") == []

    async def disclose(request: Any, context: HandlerContext) -> Outcome:
        return Outcome(instruction="Disclose.", reply="Our approved disclosure.")

    fees = Category(name="FEES", description="Fees", request=None, handler=None)
    shop = [*categories(), fees]
    shop[0] = Category(
        name="ORDERS", description="Orders", request=shop[0].request, handler=disclose
    )
    team.route = lambda r: "ORDERS"
    team.extract = lambda r: {"request": {"variety": "purple", "bags": 2}}
    orch = Orchestrator(shop, model=team.model(), store=db_url, review=True)
    approved = await orch.handle("c2", "two bags")
    await orch.aclose()
    assert approved.text == "Our approved disclosure." and not approved.reviewed
    assert team.of("review") == []
