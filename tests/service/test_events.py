"""The live event streams over a real server (uvicorn on a thread), on SQLite and PostgreSQL:
a conversation's messages and hand-off changes, the operators' queue, resuming with
Last-Event-ID, keep-alives, and who may follow what."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from frontdesk.service import TokenVerifier, create_app
from frontdesk.service._events import StreamTiming
from tests.service import _shop
from tests.service._server import serve_thread
from tests.service.conftest import SECRET, auth

pytestmark = pytest.mark.timeout(120)

OPERATOR = ("operator",)
FAST = StreamTiming(poll=0.1, keepalive=0.4)


class Follower:
    """Reads an SSE stream on a thread: `events` (the JSON data), `ids`, `comments`."""

    def __init__(self, url: str, path: str, headers: dict[str, str]) -> None:
        self.events: list[dict[str, Any]] = []
        self.ids: list[str] = []
        self.comments = 0
        self.status: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url + path, headers), daemon=True)
        self._thread.start()

    def _run(self, url: str, headers: dict[str, str]) -> None:
        with (
            httpx.Client(timeout=httpx.Timeout(30.0, read=5.0)) as client,
            client.stream("GET", url, headers=headers) as response,
        ):
            self.status = response.status_code
            if response.status_code != 200:
                return
            frame: dict[str, str] = {}
            for line in response.iter_lines():
                if self._stop.is_set():
                    return
                if line.startswith(":"):
                    self.comments += 1
                elif line.startswith("id: "):
                    frame["id"] = line[4:]
                elif line.startswith("data: "):
                    frame["data"] = line[6:]
                elif not line and frame:
                    if "data" in frame:
                        self.ids.append(frame.get("id", ""))
                        self.events.append(json.loads(frame["data"]))
                    frame = {}

    def wait(self, found: Callable[[list[dict[str, Any]]], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not found(list(self.events)):
            assert time.monotonic() < deadline, f"not seen in {timeout} s: {self.events}"
            time.sleep(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "message"]


def has_text(text: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: any(e.get("text") == text for e in messages(events))


@pytest.fixture(params=["sqlite", "postgresql"])
def base_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        store = f"sqlite:///{tmp_path / 'events.db'}"
    else:
        store = str(request.getfixturevalue("fresh_pg_url"))
    app = create_app(
        _shop.build(store),
        verifier=TokenVerifier(secret=SECRET),
        owns_orchestrator=True,
        event_timing=FAST,
        allow_client_conversation_ids=True,  # The tests name their conversations.
    )
    with serve_thread(app) as url:
        yield url


def post(url: str, path: str, user: str, body: dict[str, Any] | None = None, **kw: Any) -> Any:
    headers = auth(user, **kw)
    if path.endswith("/messages"):  # One key per message, as every client must send.
        headers["Idempotency-Key"] = uuid.uuid4().hex
    r = httpx.post(url + path, json=body, headers=headers, timeout=30.0)
    assert r.status_code == 200, r.text
    return r.json()


def say(url: str, cid: str, text: str, user: str = "alice") -> Any:
    return post(url, f"/v1/conversations/{cid}/messages", user, {"text": text})


def test_a_customer_sees_each_message_and_a_person_stepping_in_live(base_url: str) -> None:
    cid = "ev-" + str(time.time_ns())
    say(base_url, cid, "hello")
    follow = Follower(base_url, f"/v1/conversations/{cid}/events", auth("alice"))
    try:
        follow.wait(has_text("You said: hello."))  # the conversation so far
        say(base_url, cid, "can I talk to a person please")
        follow.wait(lambda ev: any(e.get("state") == "opened" for e in ev))
        follow.wait(lambda ev: any(e["type"] == "queue_position" for e in ev))
        assert [e["position"] for e in follow.events if e["type"] == "queue_position"] == [1]
        assert not any(e.get("state") == "claimed" for e in follow.events)

        claimed = post(base_url, f"/v1/conversations/{cid}/claim", "sam", roles=OPERATOR)
        assert claimed == {"conversation_id": cid, "claimed_by": "sam", "previous": None}
        follow.wait(lambda ev: any(e.get("state") == "claimed" for e in ev))
        (claim,) = [e for e in follow.events if e.get("state") == "claimed"]
        assert claim["claimed_by"] == "agent"  # never the operator's internal id

        say(base_url, cid, "are you there?")
        follow.wait(lambda ev: any(e.get("kind") == "handoff" for e in messages(ev)))
        waiting = [e for e in messages(follow.events) if e["kind"] == "handoff"][-1]
        sent = time.monotonic()
        post(
            base_url,
            f"/v1/conversations/{cid}/operator-messages",
            "sam",
            {"text": "Hi, Sam here."},
            roles=OPERATOR,
        )
        follow.wait(has_text("Hi, Sam here."), timeout=2.0)  # within 2 s, no reload
        assert time.monotonic() - sent < 2.0
        (answer,) = [e for e in messages(follow.events) if e["text"] == "Hi, Sam here."]
        assert answer["author"] == "agent" and answer["role"] == "assistant"
        assert set(answer) >= {"id", "author", "text", "time"}
        follow.wait(lambda ev: {"type": "message_removed", "id": waiting["id"]} in ev)

        post(base_url, f"/v1/conversations/{cid}/hand-back", "sam", roles=OPERATOR)
        follow.wait(lambda ev: any(e.get("state") == "handed_back" for e in ev))
        ids = [i for i, e in zip(follow.ids, follow.events, strict=True) if e["type"] == "message"]
        assert len(ids) == len(set(ids))  # each message once
        assert "operator:sam" not in json.dumps(follow.events)
    finally:
        follow.close()


def test_another_customers_conversation_is_404_like_a_missing_one(base_url: str) -> None:
    cid = "ev-" + str(time.time_ns())
    say(base_url, cid, "hello")
    with httpx.Client(timeout=10.0) as client:
        theirs = client.get(f"{base_url}/v1/conversations/{cid}/events", headers=auth("bob"))
        missing = client.get(f"{base_url}/v1/conversations/nope-{cid}/events", headers=auth("bob"))
        queue = client.get(f"{base_url}/v1/handoffs/events", headers=auth("alice"))
        anonymous = client.get(f"{base_url}/v1/conversations/{cid}/events")
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["type"] == missing.json()["type"]
    assert queue.status_code == 403 and anonymous.status_code == 401


def test_a_reconnect_with_last_event_id_gets_only_what_came_after(base_url: str) -> None:
    cid = "ev-" + str(time.time_ns())
    say(base_url, cid, "first")
    first = Follower(base_url, f"/v1/conversations/{cid}/events", auth("alice"))
    try:
        first.wait(has_text("You said: first."))
    finally:
        first.close()
    last = first.ids[-1]
    say(base_url, cid, "second")
    again = Follower(
        base_url, f"/v1/conversations/{cid}/events", {**auth("alice"), "Last-Event-ID": last}
    )
    try:
        again.wait(has_text("You said: second."))
        texts = [e["text"] for e in messages(again.events)]
        assert texts == ["second", "You said: second."]
        assert all(i > last for i in again.ids)
        time.sleep(FAST.keepalive * 3)
        assert again.comments >= 1  # keep-alives while nothing happens
    finally:
        again.close()


def test_operators_see_the_queue_change_live(base_url: str) -> None:
    cid = "ev-" + str(time.time_ns())
    say(base_url, cid, "hello")
    queue = Follower(base_url, "/v1/handoffs/events", auth("sam", roles=OPERATOR))
    try:
        queue.wait(lambda ev: any(e["type"] == "queue" for e in ev))
        say(base_url, cid, "a person please")

        def change(kind: str) -> Callable[[list[dict[str, Any]]], bool]:
            return lambda ev: any(
                c["conversation_id"] == cid and c["change"] == kind
                for e in ev
                for c in e.get("changes", [])
            )

        queue.wait(change("queued"))
        post(base_url, f"/v1/conversations/{cid}/claim", "sam", roles=OPERATOR)
        queue.wait(change("claimed"))
        latest = [e for e in queue.events if e["type"] == "queue"][-1]
        (entry,) = [h for h in latest["handoffs"] if h["conversation_id"] == cid]
        assert entry["claimed_by"] == "sam" and entry["user_id"] == "alice"
        post(base_url, f"/v1/conversations/{cid}/hand-back", "sam", roles=OPERATOR)
        queue.wait(change("closed"))
    finally:
        queue.close()


def test_a_second_operator_is_refused_until_they_claim(base_url: str) -> None:
    cid = "ev-" + str(time.time_ns())
    say(base_url, cid, "a person please")
    post(base_url, f"/v1/conversations/{cid}/claim", "ann", roles=OPERATOR)
    with httpx.Client(timeout=10.0) as client:
        refused = client.post(
            f"{base_url}/v1/conversations/{cid}/operator-messages",
            json={"text": "Bob here"},
            headers=auth("bob", roles=OPERATOR),
        )
    assert refused.status_code == 409 and "claim" in refused.json()["detail"]
    taken = post(base_url, f"/v1/conversations/{cid}/claim", "bob", roles=OPERATOR)
    assert taken["previous"] == "ann"
    post(
        base_url,
        f"/v1/conversations/{cid}/operator-messages",
        "bob",
        {"text": "Bob here"},
        roles=OPERATOR,
    )
    context = httpx.get(
        f"{base_url}/v1/conversations/{cid}/context", headers=auth("bob", roles=OPERATOR)
    ).json()
    assert context["user_id"] == "alice" and context["summary"] is None
    assert [(t["text"], t["category"]) for t in context["turns"]] == [("a person please", "HUMAN")]
    customer = httpx.get(f"{base_url}/v1/conversations/{cid}/context", headers=auth("alice"))
    assert customer.status_code == 403
