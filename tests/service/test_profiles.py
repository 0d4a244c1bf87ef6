"""Two businesses on one service: the potato shop and the card desk side by side. A
customer's token names the profile; an operator's token with `profiles`/`queues` sees and
acts only on those conversations; operator reads are audited; erasure needs `privacy`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from frontdesk.audit.chains import user_chain_id
from frontdesk.examples.card_desk import desks
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.service._auth import mint_token
from tests.service.conftest import SECRET, Api, open_api

pytestmark = pytest.mark.anyio


def answer(request: ModelRequest) -> Any:
    if request.expert == "triage":
        text = str(request.messages[-1]["content"])
        return {"category": "HUMAN" if "person" in text else "OTHER", "reason": "wants a human"}
    if request.expert == "memory":
        return {"facts": []}
    return f"{'bank' if 'Sample Bank' in request.system else 'shop'} reply"


def auth(user: str, **claims: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(SECRET, user, extra=claims)}"}


@pytest.fixture(params=["sqlite", "postgresql"])
def own_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database of this test's own: the hand-offs it leaves open stay out of the queue
    other tests read (the session's PostgreSQL database is shared)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'desks.db'}"
    return str(request.getfixturevalue("fresh_pg_url"))


@pytest.fixture
async def api(own_url: str) -> AsyncIterator[Api]:
    async for opened in open_api(desks(model=FunctionModel(answer), store=own_url)):
        yield opened


async def start(api: Api, user: str, profile: str, text: str) -> tuple[str, dict[str, Any]]:
    made = await api.client.post("/v1/conversations", headers=auth(user, profile=profile))
    assert made.status_code == 201, made.text
    cid = made.json()["conversation_id"]
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": text},
        headers={**auth(user, profile=profile), "Idempotency-Key": f"{cid}-1"},
    )
    assert r.status_code == 200, r.text
    return cid, r.json()


async def test_each_customer_is_answered_by_the_profile_their_token_names(api: Api) -> None:
    shop, shop_reply = await start(api, "ann-" + api.cid(), "potatoes", "hello")
    bank, bank_reply = await start(api, "bob-" + api.cid(), "cards", "hello")
    assert shop_reply["text"] == "shop reply" and bank_reply["text"] == "bank reply"
    assert (await api.orch.store.conversation(shop)) is not None
    recorded = await api.orch.store.conversation(bank)
    assert recorded is not None and recorded.profile == "cards"
    unknown = await api.client.post("/v1/conversations", headers=auth("eve", profile="nope"))
    assert unknown.status_code == 401


async def test_an_operator_sees_and_acts_only_on_the_profiles_of_their_token(api: Api) -> None:
    ann, bob = "ann-" + api.cid(), "bob-" + api.cid()
    shop, _ = await start(api, ann, "potatoes", "a person please")
    bank, _ = await start(api, bob, "cards", "a person please")
    potato_desk = auth("sam", roles=["operator"], profiles=["potatoes"])
    listed = await api.client.get("/v1/handoffs", headers=potato_desk)
    seen = {h["conversation_id"]: h["profile"] for h in listed.json()["handoffs"]}
    assert seen.get(shop) == "potatoes" and bank not in seen
    everyone = await api.client.get("/v1/handoffs", headers=auth("kim", roles=["operator"]))
    assert {shop, bank} <= {h["conversation_id"] for h in everyone.json()["handoffs"]}
    for path in (
        f"/v1/conversations/{bank}/context",
        f"/v1/conversations/{bank}/transcript",
        f"/v1/conversations/{bank}/thread",
    ):
        r = await api.client.get(path, headers=potato_desk)
        assert r.status_code == 404, path
    for path, body in (
        (f"/v1/conversations/{bank}/claim", None),
        (f"/v1/conversations/{bank}/operator-messages", {"text": "hi"}),
        (f"/v1/conversations/{bank}/hand-back", None),
    ):
        r = await api.client.post(path, json=body, headers=potato_desk)
        assert r.status_code == 404, path
    context = await api.client.get(f"/v1/conversations/{shop}/context", headers=potato_desk)
    assert context.status_code == 200 and context.json()["user_id"] == ann
    claimed = await api.client.post(f"/v1/conversations/{shop}/claim", headers=potato_desk)
    assert claimed.status_code == 200
    # A queue the hand-off is not in: not seen, not acted on.
    other_queue = auth("lee", roles=["operator"], queues=["billing"])
    queue = (await api.client.get("/v1/handoffs", headers=other_queue)).json()["handoffs"]
    assert queue == []
    r = await api.client.get(f"/v1/conversations/{shop}/context", headers=other_queue)
    assert r.status_code == 404
    served = auth("lee", roles=["operator"], queues=["wants a human"])
    r = await api.client.get(f"/v1/conversations/{bank}/context", headers=served)
    assert r.status_code == 200


async def test_an_operators_reads_are_audited_in_the_customers_chain(api: Api) -> None:
    ann = "ann-" + api.cid()
    shop, _ = await start(api, ann, "potatoes", "hello")
    desk = auth("sam", roles=["operator"])
    assert (await api.client.get(f"/v1/conversations/{shop}/context", headers=desk)).is_success
    r = await api.client.get(f"/v1/conversations/{shop}/transcript", headers=desk)
    assert r.is_success
    log = api.orch.audit_log
    assert log is not None
    reads = [
        e.payload
        for e in await log.events(user_chain_id(ann, log.refs))
        if e.kind == "operator_read"
    ]
    assert reads == [
        {
            "by": "operator:sam",
            "conversation_id": shop,
            "what": ["context", "transcript", "memories"],
        },
        {"by": "operator:sam", "conversation_id": shop, "what": ["transcript"]},
    ]
    # The customer reading their own transcript is not an operator's read.
    await api.client.get(f"/v1/conversations/{shop}/transcript", headers=auth(ann))
    assert (
        len(
            [e for e in await log.events(user_chain_id(ann, log.refs)) if e.kind == "operator_read"]
        )
        == 2
    )


async def test_erasure_needs_the_privacy_role(api: Api) -> None:
    ann = "ann-" + api.cid()
    await start(api, ann, "potatoes", "hello")
    r = await api.client.post(f"/v1/users/{ann}/erase", headers=auth("sam", roles=["operator"]))
    assert r.status_code == 403
    officer = auth("pat", roles=["operator", "privacy"])
    r = await api.client.post(f"/v1/users/{ann}/erase", headers=officer)
    assert r.status_code == 200 and r.json()["conversations"] == 1


async def test_a_customers_memories_and_the_operator_context_are_the_profiles_own(
    api: Api,
) -> None:
    """One user id at both desks: `GET /v1/me/memories` and the operator's context list
    only what the token's (the conversation's) profile keeps, each fact with its trust."""
    user = "uma-" + api.cid()
    shop, _ = await start(api, user, "potatoes", "hello")
    bank, _ = await start(api, user, "cards", "hello")
    await api.orch.memory.remember(user, "Likes waxy potatoes", profile="potatoes")
    await api.orch.memory.remember(user, "Card ends 4242", profile="cards", trust="customer")
    await api.orch.memory.remember(user, "Salary on the 25th", profile="cards")
    mine = await api.client.get("/v1/me/memories", headers=auth(user, profile="cards"))
    assert [m["text"] for m in mine.json()["memories"]] == ["Salary on the 25th", "Card ends 4242"]
    at_shop = await api.client.get("/v1/me/memories", headers=auth(user, profile="potatoes"))
    [fact] = at_shop.json()["memories"]
    assert fact["text"] == "Likes waxy potatoes"
    # Another profile's fact is not this customer's to delete at this desk: 404.
    r = await api.client.delete(
        f"/v1/me/memories/{fact['id']}", headers=auth(user, profile="cards")
    )
    assert r.status_code == 404
    desk = auth("sam", roles=["operator"])
    context = (await api.client.get(f"/v1/conversations/{bank}/context", headers=desk)).json()
    assert [(f["text"], f["trust"]) for f in context["facts"]] == [
        ("Salary on the 25th", "verified"),
        ("Card ends 4242", "customer"),
    ]
    assert context["memories"] == ["Salary on the 25th", "Card ends 4242"]
    context = (await api.client.get(f"/v1/conversations/{shop}/context", headers=desk)).json()
    assert [(f["text"], f["trust"]) for f in context["facts"]] == [
        ("Likes waxy potatoes", "verified")
    ]
