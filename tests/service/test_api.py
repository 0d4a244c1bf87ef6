"""The `/v1` turn routes: JSON and SSE replies, thread, transcript, edit, regenerate, errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from frontdesk.errors import EmptyMessage, InvalidUserText
from frontdesk.orchestrator._input import check_user_text
from tests.service import _shop
from tests.service.conftest import Api, auth, open_api

pytestmark = pytest.mark.anyio

REPLY_KEYS = {
    "text",
    # Conversations as people have them (issue 44, docs/conversations.md).
    "categories",
    "clarify",
    "pending",
    "cancelled",
    "language",
    "confirmation",
    "awaiting_confirmation",
    "category",
    "routed_by",
    "request",
    "need_more_info",
    "message_id",
    "user_message_id",
    "handoff",
    "citations",
}


def sse(body: str) -> list[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of an SSE body."""
    events = []
    for frame in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in frame.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


async def test_a_message_is_answered_as_json(api: Api) -> None:
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": "hello"}, headers=auth("u1")
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == REPLY_KEYS
    assert body["text"] == "You said: hello."
    assert body["category"] == "OTHER" and body["handoff"] is False
    assert body["routed_by"] == "triage"
    transcript = await api.orch.transcript(cid, user_id="u1")
    assert [m.id for m in transcript] == [body["user_message_id"], body["message_id"]]


async def test_the_idempotency_key_replays_the_stored_reply(api: Api) -> None:
    cid = api.cid()
    url = f"/v1/conversations/{cid}/messages"
    headers = {**auth("u1"), "Idempotency-Key": "k-1"}
    first = await api.client.post(url, json={"text": "count one"}, headers=headers)
    again = await api.client.post(url, json={"text": "count one"}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert len(await api.orch.transcript(cid, user_id="u1")) == 2
    other = await api.client.post(url, json={"text": "count two"}, headers=headers)
    assert other.status_code == 409 and other.json()["type"] == "IdempotencyConflict"


async def test_a_stream_sends_one_event_per_turn_event(api: Api) -> None:
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": "count the potatoes in the sack"},
        headers={**auth("u1"), "Accept": "text/event-stream"},
    )
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse(r.text)
    kinds = [k for k, _ in events]
    assert kinds[:2] == ["routed", "extracted"] and kinds[-1] == "done"
    assert set(kinds[2:-1]) == {"delta"} and len(kinds) > 4
    assert events[0][1] == {"category": "COUNT", "routed_by": "triage"}
    assert events[1][1] == {"request": {"note": "x"}, "need_more_info": None}
    done = events[-1][1]
    assert set(done) == REPLY_KEYS
    assert "".join(d["text"] for k, d in events if k == "delta") == done["text"]
    assert done["text"] == "You said: count the potatoes in the sack."


async def test_thread_and_transcript(api: Api) -> None:
    cid = api.cid()
    for text in ("hello", "and again"):
        r = await api.client.post(
            f"/v1/conversations/{cid}/messages", json={"text": text}, headers=auth("u1")
        )
        assert r.status_code == 200
    thread = await api.client.get(f"/v1/conversations/{cid}/thread", headers=auth("u1"))
    assert thread.status_code == 200
    assert thread.json()["messages"] == [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "You said: hello."},
        {"role": "user", "content": "and again"},
        {"role": "assistant", "content": "You said: and again."},
    ]
    transcript = await api.client.get(f"/v1/conversations/{cid}/transcript", headers=auth("u1"))
    messages = transcript.json()["messages"]
    assert [(m["role"], m["author"]) for m in messages] == [
        ("user", "user"),
        ("assistant", "bot"),
        ("user", "user"),
        ("assistant", "bot"),
    ]
    assert all({"id", "role", "content", "author"} <= set(m) for m in messages)


async def test_edit_and_regenerate_make_branches(api: Api) -> None:
    cid = api.cid()
    url = f"/v1/conversations/{cid}/messages"
    first = (await api.client.post(url, json={"text": "hello"}, headers=auth("u1"))).json()
    edited = await api.client.post(
        f"{url}/{first['user_message_id']}/edit", json={"text": "hi there"}, headers=auth("u1")
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["text"] == "You said: hi there."
    again = await api.client.post(
        f"{url}/{edited.json()['message_id']}/regenerate", headers=auth("u1")
    )
    assert again.status_code == 200
    assert again.json()["user_message_id"] == edited.json()["user_message_id"]
    assert again.json()["message_id"] != edited.json()["message_id"]
    transcript = await api.orch.transcript(cid, user_id="u1")
    assert [m.content for m in transcript] == ["hi there", "You said: hi there."]
    assert transcript[-1].id == again.json()["message_id"]


async def test_a_message_of_another_conversation_is_not_found(api: Api) -> None:
    a, b = api.cid(), api.cid()
    first = (
        await api.client.post(
            f"/v1/conversations/{a}/messages", json={"text": "hello"}, headers=auth("u1")
        )
    ).json()
    await api.client.post(
        f"/v1/conversations/{b}/messages", json={"text": "hello"}, headers=auth("u1")
    )
    r = await api.client.post(
        f"/v1/conversations/{b}/messages/{first['user_message_id']}/edit",
        json={"text": "x"},
        headers=auth("u1"),
    )
    assert r.status_code == 404


@pytest.mark.parametrize("text", ["", "   ", "a\x00b", "x" * 16_001])
async def test_bad_text_is_422_with_the_librarys_message(api: Api, text: str) -> None:
    with pytest.raises(InvalidUserText) as raised:
        check_user_text(text, max_chars=16_000)
    r = await api.client.post(
        f"/v1/conversations/{api.cid()}/messages", json={"text": text}, headers=auth("u1")
    )
    assert r.status_code == 422
    assert r.json()["detail"] == str(raised.value)
    assert r.json()["type"] == type(raised.value).__name__


async def test_a_stream_of_bad_text_is_422_not_a_stream(api: Api) -> None:
    r = await api.client.post(
        f"/v1/conversations/{api.cid()}/messages",
        json={"text": " "},
        headers={**auth("u1"), "Accept": "text/event-stream"},
    )
    assert r.status_code == 422 and r.json()["type"] == EmptyMessage.__name__


async def test_a_provider_outage_is_503_with_the_safe_reply(api: Api) -> None:
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": "outage now"}, headers=auth("u1")
    )
    assert r.status_code == 503
    transcript = await api.orch.transcript(cid, user_id="u1")
    assert transcript[-1].failed
    assert r.json()["detail"] == r.json()["text"] == transcript[-1].content


async def test_a_streamed_outage_ends_with_failed(api: Api) -> None:
    r = await api.client.post(
        f"/v1/conversations/{api.cid()}/messages",
        json={"text": "outage again"},
        headers={**auth("u1"), "Accept": "text/event-stream"},
    )
    assert r.status_code == 200
    kind, data = sse(r.text)[-1]
    assert kind == "failed" and data["partial"] is False and data["text"]


async def test_a_busy_conversation_is_409(store_url: str) -> None:
    orch = _shop.build(store_url)
    orch.lock_timeout = 0.2  # Read when it opens (a setting's setter refuses after).
    async for api in open_api(orch):
        cid = api.cid()
        url = f"/v1/conversations/{cid}/messages"
        await api.client.post(url, json={"text": "hello"}, headers=auth("u1"))
        async with api.orch.store.conversation_lock(cid, timeout=1.0, ttl=30.0):
            r = await api.client.post(url, json={"text": "while busy"}, headers=auth("u1"))
        assert r.status_code == 409 and r.json()["type"] == "ConversationBusy"
        assert r.headers["retry-after"] == "1"


async def test_health_and_readiness(api: Api) -> None:
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    ready = await api.client.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    assert body["status"] == "ok" and body["schema_revision"] == body["head"]


async def test_the_openapi_document_names_the_routes(api: Api) -> None:
    paths = (await api.client.get("/openapi.json")).json()["paths"]
    for path in (
        "/v1/conversations/{conversation_id}/messages",
        "/v1/conversations/{conversation_id}/thread",
        "/v1/conversations/{conversation_id}/transcript",
        "/v1/conversations/{conversation_id}/messages/{message_id}/edit",
        "/v1/conversations/{conversation_id}/messages/{message_id}/regenerate",
        "/healthz",
        "/readyz",
    ):
        assert path in paths


async def test_readiness_fails_while_the_schema_is_not_current(api: Api) -> None:
    async with api.orch.store.engine.begin() as conn:
        await conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0001_threads'")
    try:
        ready = await api.client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["status"] == "outdated"
        assert ready.json()["schema_revision"] == ["0001_threads"]
        assert (await api.client.get("/healthz")).status_code == 200
    finally:
        head = (await api.client.get("/readyz")).json()["head"][0]
        async with api.orch.store.engine.begin() as conn:
            await conn.exec_driver_sql(f"UPDATE alembic_version SET version_num = '{head}'")


async def test_a_405_names_every_method_of_the_path(api: Api) -> None:
    r = await api.client.request("PUT", "/v1/me/memories", headers=auth("u1"))
    assert r.status_code == 405 and r.json()["type"] == "MethodNotAllowed"
    assert {"GET", "DELETE"} <= {m.strip() for m in r.headers["allow"].split(",")}
