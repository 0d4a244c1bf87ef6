"""The stream's `routed` event says who routed the turn (`routed_by`), as the reply will:
`router` when the embedding router was confident (no triage call), else `triage`; a retry
of a turn whose outcome is stored shows the stored route."""

from __future__ import annotations

from typing import Any

import pytest

from frontdesk.errors import ProviderOverloaded
from frontdesk.experts.providers import ModelRequest, StreamCut
from frontdesk.orchestrator.stream import Done, Failed, Routed, TurnEvent
from tests.orchestrator.test_router import AxisEmbedder, app, team

pytestmark = pytest.mark.anyio


async def test_the_routed_event_says_router_or_triage_as_the_reply_does(db_url: str) -> None:
    fake, embedder = team(), AxisEmbedder()
    async with app(db_url, fake, embedder) as orch:
        near: list[TurnEvent] = [e async for e in orch.stream("c", "my card is lost, 1234")]
        between: list[TurnEvent] = [e async for e in orch.stream("d", "a card fee")]
    assert near[0] == Routed(category="CARDS", routed_by="router")
    assert isinstance(near[-1], Done) and near[-1].reply.routed_by == "router"
    assert len(fake.of("triage")) == 1  # "a card fee" only
    assert between[0] == Routed(category="FEES", routed_by="triage")
    assert isinstance(between[-1], Done) and between[-1].reply.routed_by == "triage"


async def test_a_retried_turn_shows_the_route_its_stored_outcome_took(db_url: str) -> None:
    """The reply's stream broke after the handler ran: the retry reuses the stored outcome (no
    routing again) and its `routed` event still says the router routed it."""
    fake, embedder = team(), AxisEmbedder()
    failing = {"on": True}

    def reply(request: ModelRequest) -> Any:
        if failing["on"]:  # The stream breaks after its first word: the turn fails.
            return StreamCut(text="Your", error=ProviderOverloaded("down", status_code=529))
        return "Your card is frozen."

    fake.reply_for = reply  # type: ignore[method-assign]
    async with app(db_url, fake, embedder) as orch:
        first = [e async for e in orch.stream("c", "my card is lost, 1234", client_message_id="k")]
        failing["on"] = False
        again = [e async for e in orch.stream("c", "my card is lost, 1234", client_message_id="k")]
    assert isinstance(first[-1], Failed)
    assert again[0] == Routed(category="CARDS", routed_by="router")
    assert isinstance(again[-1], Done) and again[-1].reply.routed_by == "router"
