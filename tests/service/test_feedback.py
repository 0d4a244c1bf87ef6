"""Did it help, over HTTP (issue 45): `GET /v1/conversations/{cid}` shows the resolution,
and `POST .../messages/{mid}/feedback` rates one's own answers only (404 for anyone else's)."""

from __future__ import annotations

import pytest

from tests.service.conftest import Api, auth

pytestmark = pytest.mark.anyio


async def test_a_customer_rates_their_own_answer_and_resolves_it(strict_api: Api) -> None:
    api = strict_api
    r = await api.client.post("/v1/conversations", json={}, headers=auth("alice"))
    cid = r.json()["conversation_id"]
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": "hello"},
        headers={**auth("alice"), "Idempotency-Key": "m-1"},
    )
    assert r.status_code == 200, r.text
    mid = r.json()["message_id"]
    state = await api.client.get(f"/v1/conversations/{cid}", headers=auth("alice"))
    assert state.status_code == 200 and state.json()["resolution"] == "open"
    assert (
        await api.client.get(f"/v1/conversations/{cid}", headers=auth("bob"))
    ).status_code == 404

    url = f"/v1/conversations/{cid}/messages/{mid}/feedback"
    refused = await api.client.post(url, json={"rating": 5}, headers=auth("bob"))
    assert refused.status_code == 404, refused.text
    bad = await api.client.post(url, json={"rating": 7}, headers=auth("alice"))
    assert bad.status_code == 422 and "1 to 5" in bad.json()["detail"]
    down = await api.client.post(
        url, json={"rating": 1, "comment": "wrong answer"}, headers=auth("alice")
    )
    assert down.status_code == 200, down.text
    assert down.json() == {
        "message_id": mid,
        "rating": 1,
        "comment": "wrong answer",
        "resolved": False,
    }
    up = await api.client.post(url, json={"rating": 5}, headers=auth("alice"))
    assert up.status_code == 200 and up.json()["resolved"] is True
    state = (await api.client.get(f"/v1/conversations/{cid}", headers=auth("alice"))).json()
    assert (state["resolution"], state["resolved_by"]) == ("resolved", "customer")
    operator = await api.client.get(
        f"/v1/conversations/{cid}", headers=auth("olga", roles=("operator",))
    )
    assert operator.status_code == 200 and operator.json()["resolution"] == "resolved"
    scrape = (await api.client.get("/metrics")).text
    assert 'frontdesk_conversations_total{resolution="resolved"}' in scrape
    assert 'frontdesk_feedback_total{frontdesk_rating="5",frontdesk_variant=""}' in scrape
