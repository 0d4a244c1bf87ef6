"""`/v1/me/memories`: a user sees and deletes only their own facts."""

from __future__ import annotations

import pytest

from tests.service.conftest import Api, auth

pytestmark = pytest.mark.anyio


async def test_a_user_sees_and_deletes_only_their_own_memories(api: Api) -> None:
    alice, bob = "alice-" + api.cid(), "bob-" + api.cid()  # PostgreSQL's is shared
    first = await api.orch.remember(alice, "Alice is allergic to peanuts", key="allergy")
    second = await api.orch.remember(alice, "Alice prefers purple potatoes", key="variety")
    bobs = await api.orch.remember(bob, "Bob lives in Leeds", key="city")

    listed = await api.client.get("/v1/me/memories", headers=auth(alice))
    assert listed.status_code == 200
    memories = listed.json()["memories"]
    assert [m["id"] for m in memories] == [second.id, first.id]  # newest first
    assert memories[0]["text"] == "Alice prefers purple potatoes"
    assert memories[0]["key"] == "variety" and memories[0]["source"] == "user"
    assert memories[0]["trust"] == "verified"  # The application wrote it.

    theirs = await api.client.delete(f"/v1/me/memories/{bobs.id}", headers=auth(alice))
    missing = await api.client.delete("/v1/me/memories/nope", headers=auth(alice))
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json() == missing.json()
    assert [m.id for m in await api.orch.memories(bob)] == [bobs.id]

    one = await api.client.delete(f"/v1/me/memories/{first.id}", headers=auth(alice))
    assert one.status_code == 200 and one.json() == {"deleted": 1}
    assert [m.id for m in await api.orch.memories(alice)] == [second.id]

    everything = await api.client.delete("/v1/me/memories", headers=auth(alice))
    assert everything.status_code == 200 and everything.json() == {"deleted": 1}
    assert (await api.client.get("/v1/me/memories", headers=auth(alice))).json() == {
        "memories": [],
        "past_conversations": [],
    }
    assert [m.id for m in await api.orch.memories(bob)] == [bobs.id]


async def test_memories_need_a_token(api: Api) -> None:
    assert (await api.client.get("/v1/me/memories")).status_code == 401
    assert (await api.client.delete("/v1/me/memories")).status_code == 401


async def test_what_the_user_says_is_remembered_and_listed(api: Api) -> None:
    user = "carol-" + api.cid()
    r = await api.client.post(
        f"/v1/conversations/{api.cid()}/messages",
        json={"text": "remember that I only eat purple potatoes"},
        headers=auth(user),
    )
    assert r.status_code == 200
    await api.orch.aclose()  # waits for the memory expert, which runs after the reply
    listed = (await api.client.get("/v1/me/memories", headers=auth(user))).json()["memories"]
    assert [(m["text"], m["source"], m["trust"]) for m in listed] == [
        ("I only eat purple potatoes", "memory_expert", "customer")
    ]


async def test_past_conversations_are_listed_apart_from_the_facts(api: Api) -> None:
    user, cid = "dan-" + api.cid(), api.cid()
    await api.orch.remember(user, "Dan prefers email", key="contact")
    await api.orch.handle(cid, "hello", user_id=user)
    record = await api.orch.store.conversation(cid)
    assert record is not None and record.active_leaf_id is not None
    kept = await api.orch.memory.store.keep_summary(
        user, cid, record.active_leaf_id, "Dan asked about delivery.", erased="[erased]"
    )
    assert kept is not None
    body = (await api.client.get("/v1/me/memories", headers=auth(user))).json()
    assert [m["text"] for m in body["memories"]] == ["Dan prefers email"]
    assert [(m["text"], m["conversation_id"], m["trust"]) for m in body["past_conversations"]] == [
        ("Dan asked about delivery.", cid, "customer")
    ]
    gone = await api.client.delete(f"/v1/me/memories/{kept[0].id}", headers=auth(user))
    assert gone.status_code == 200
    body = (await api.client.get("/v1/me/memories", headers=auth(user))).json()
    assert body["past_conversations"] == []
