"""How a turn was routed, on the service: `routed_by` in the JSON reply, and in the stream's
`routed` event, before the first word."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.orchestrator.test_router import AxisEmbedder, team
from tests.orchestrator.test_router import app as router_app
from tests.service.conftest import Api, auth, open_api
from tests.service.test_api import sse

pytestmark = pytest.mark.anyio


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    """The router's test bank (CARDS, FEES, TRANSFERS) over a fake embedder, as a service."""
    orch = router_app(f"sqlite:///{tmp_path / 'routed.db'}", team(), AxisEmbedder())
    async for opened in open_api(orch):
        yield opened


async def test_the_json_reply_says_who_routed_it(api: Api) -> None:
    url = f"/v1/conversations/{api.cid()}/messages"
    near = await api.client.post(url, json={"text": "my card is lost, 1234"}, headers=auth("u1"))
    assert near.status_code == 200, near.text
    assert near.json()["category"] == "CARDS" and near.json()["routed_by"] == "router"
    between = await api.client.post(url, json={"text": "a card fee"}, headers=auth("u1"))
    assert between.status_code == 200, between.text
    assert between.json()["routed_by"] == "triage"


async def test_the_routed_event_says_who_routed_it_before_the_first_word(api: Api) -> None:
    url = f"/v1/conversations/{api.cid()}/messages"
    stream = {**auth("u1"), "Accept": "text/event-stream"}
    near = sse(
        (await api.client.post(url, json={"text": "my card is lost, 1234"}, headers=stream)).text
    )
    kinds = [kind for kind, _ in near]
    assert kinds.index("routed") < kinds.index("delta")
    assert near[0] == ("routed", {"category": "CARDS", "routed_by": "router"})
    assert near[-1][0] == "done" and near[-1][1]["routed_by"] == "router"
    between = sse((await api.client.post(url, json={"text": "a card fee"}, headers=stream)).text)
    assert between[0] == ("routed", {"category": "FEES", "routed_by": "triage"})
    assert between[-1][1]["routed_by"] == "triage"


async def test_a_retried_turn_streams_the_route_it_stored(api: Api) -> None:
    """A retry with the same key replays the stored reply: `done` says the router routed it."""
    url = f"/v1/conversations/{api.cid()}/messages"
    headers = {**auth("u1"), "Accept": "text/event-stream", "Idempotency-Key": "k-1"}
    body = {"text": "my card is lost, 1234"}
    first = sse((await api.client.post(url, json=body, headers=headers)).text)
    again = sse((await api.client.post(url, json=body, headers=headers)).text)
    assert first[-1][1]["routed_by"] == again[-1][1]["routed_by"] == "router"
    assert again[-1][1]["message_id"] == first[-1][1]["message_id"]
