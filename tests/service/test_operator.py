"""The operator routes: the queue, taking over, answering as a person, handing back; and the
operator role they need."""

from __future__ import annotations

import pytest

from tests.service.conftest import Api, auth

pytestmark = pytest.mark.anyio

OPERATOR = ("operator",)
PRIVACY = ("operator", "privacy")


async def say(api: Api, cid: str, text: str, user: str = "alice") -> dict[str, object]:
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": text}, headers=auth(user)
    )
    assert r.status_code == 200, r.text
    body: dict[str, object] = r.json()
    return body


async def test_a_customer_on_operator_routes_is_403(api: Api) -> None:
    cid = api.cid()
    await say(api, cid, "hello")
    for method, path, body in [
        ("GET", "/v1/handoffs", None),
        ("POST", f"/v1/conversations/{cid}/handoff", {"reason": "x"}),
        ("POST", f"/v1/conversations/{cid}/operator-messages", {"text": "hi"}),
        ("POST", f"/v1/conversations/{cid}/hand-back", None),
        ("POST", "/v1/users/alice/erase", None),
    ]:
        r = await api.client.request(method, path, json=body, headers=auth("alice"))
        assert r.status_code == 403, path
        anonymous = await api.client.request(method, path, json=body)
        assert anonymous.status_code == 401, path
    assert (await api.orch.handoffs()) == []


async def test_asking_for_a_person_hands_off_until_the_operator_hands_back(api: Api) -> None:
    cid = api.cid()
    await say(api, cid, "hello")
    asked = await say(api, cid, "can I talk to a person please")
    assert asked["category"] == "HUMAN" and asked["handoff"] is True

    queue = (await api.client.get("/v1/handoffs", headers=auth("op", roles=OPERATOR))).json()
    (entry,) = [h for h in queue["handoffs"] if h["conversation_id"] == cid]
    assert entry["user_id"] == "alice" and entry["waiting_seconds"] >= 0

    held = await say(api, cid, "are you there?")
    assert held["handoff"] is True  # stored for the person, no model call

    r = await api.client.post(
        f"/v1/conversations/{cid}/operator-messages",
        json={"text": "Hi, I'm Sam from the shop. How can I help?"},
        headers=auth("sam", roles=OPERATOR),
    )
    assert r.status_code == 200, r.text
    assert r.json()["author"] == "operator:sam"

    transcript = (
        await api.client.get(f"/v1/conversations/{cid}/transcript", headers=auth("alice"))
    ).json()
    assert transcript["handoff"] is True
    last = transcript["messages"][-1]
    # The customer sees "Agent", never the operator's internal identity; an operator sees it.
    assert last["id"] == r.json()["message_id"] and last["author"] == "Agent"
    as_operator = await api.client.get(
        f"/v1/conversations/{cid}/transcript", headers=auth("sam", roles=OPERATOR)
    )
    assert as_operator.json()["messages"][-1]["author"] == "operator:sam"
    assert last["content"] == "Hi, I'm Sam from the shop. How can I help?"
    thread = (await api.client.get(f"/v1/conversations/{cid}/thread", headers=auth("alice"))).json()
    assert thread["messages"][-1] == {"role": "assistant", "content": last["content"]}

    back = await api.client.post(
        f"/v1/conversations/{cid}/hand-back", headers=auth("sam", roles=OPERATOR)
    )
    assert back.status_code == 200 and back.json()["handoff"] is False
    answered = await say(api, cid, "thanks, one more thing")
    assert answered["handoff"] is False and answered["text"] == "You said: thanks, one more thing."
    again = await api.client.post(
        f"/v1/conversations/{cid}/hand-back", headers=auth("sam", roles=OPERATOR)
    )
    assert again.status_code == 409 and again.json()["type"] == "NotHandedOff"


async def test_an_operator_takes_a_conversation_over(api: Api) -> None:
    cid = api.cid()
    await say(api, cid, "hello")
    r = await api.client.post(
        f"/v1/conversations/{cid}/handoff",
        json={"reason": "VIP customer"},
        headers=auth("sam", roles=OPERATOR),
    )
    assert r.status_code == 200 and r.json()["reason"] == "VIP customer"
    assert (await say(api, cid, "hello again"))["handoff"] is True
    missing = await api.client.post(
        f"/v1/conversations/{api.cid()}/operator-messages",
        json={"text": "hi"},
        headers=auth("sam", roles=OPERATOR),
    )
    assert missing.status_code == 404
    not_handed = api.cid()
    await say(api, not_handed, "hello")
    refused = await api.client.post(
        f"/v1/conversations/{not_handed}/operator-messages",
        json={"text": "hi"},
        headers=auth("sam", roles=OPERATOR),
    )
    assert refused.status_code == 409 and refused.json()["type"] == "NotHandedOff"


async def test_erasing_a_user_needs_the_privacy_role(api: Api) -> None:
    r = await api.client.post("/v1/users/alice/erase", headers=auth("sam", roles=OPERATOR))
    assert r.status_code == 403 and "privacy" in r.text


async def test_an_operator_erases_a_user(api: Api) -> None:
    user = "erased-" + api.cid()  # the PostgreSQL database is shared by the session's tests
    cid = api.cid()
    await say(api, cid, "my card is 4111 1111 1111 1111", user=user)
    other = api.cid()
    await say(api, other, "hello", user="bob")
    url = f"/v1/users/{user}/erase"
    r = await api.client.post(url, headers=auth("sam", roles=PRIVACY))
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["user_id"] == user and body["messages"] == 2 and body["conversations"] == 1
    assert set(body) >= {"messages", "conversations", "memories", "audit_keys"}
    contents = [m.content for m in await api.orch.store.messages(cid)]
    assert all("4111" not in c for c in contents)
    assert [m.content for m in await api.orch.transcript(other, user_id="bob")][0] == "hello"
    again = await api.client.post(url, headers=auth("sam", roles=PRIVACY))
    assert again.status_code == 200 and again.json()["messages"] == 0


async def test_the_desk_reads_the_resolution_and_hands_back_resolved(api: Api) -> None:
    cid = api.cid()
    await say(api, cid, "can I talk to a person please")
    desk = auth("sam", roles=OPERATOR)
    context = (await api.client.get(f"/v1/conversations/{cid}/context", headers=desk)).json()
    assert (context["resolution"], context["resolved_by"]) == ("handed_off", None)
    wrong = await api.client.post(
        f"/v1/conversations/{cid}/hand-back", json={"resolved": "maybe"}, headers=desk
    )
    assert wrong.status_code == 422
    back = await api.client.post(
        f"/v1/conversations/{cid}/hand-back", json={"resolved": True}, headers=desk
    )
    assert back.status_code == 200, back.text
    assert back.json() == {
        "conversation_id": cid,
        "handoff": False,
        "resolution": "resolved",
        "resolved_by": "operator",
    }
    context = (await api.client.get(f"/v1/conversations/{cid}/context", headers=desk)).json()
    assert (context["resolution"], context["resolved_by"]) == ("resolved", "operator")
    assert context["resolved_at"] is not None
    state = (await api.client.get(f"/v1/conversations/{cid}", headers=auth("alice"))).json()
    assert (state["resolution"], state["resolved_by"]) == ("resolved", "operator")
