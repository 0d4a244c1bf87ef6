"""The service's default policy (`strict_api`): one message one key, server-made ids.

Without `Idempotency-Key` a message is 428 (a retry would run the handler again); a
conversation id is made by `POST /v1/conversations` and owned by the caller; a message to an
id never made, or made for someone else, is 404 alike, so ids cannot be taken first or
probed.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from tests.service import _shop
from tests.service.conftest import Api, auth

pytestmark = pytest.mark.anyio


async def _new(api: Api, user: str) -> str:
    r = await api.client.post("/v1/conversations", json={}, headers=auth(user))
    assert r.status_code == 201, r.text
    cid = r.json()["conversation_id"]
    assert isinstance(cid, str)
    return cid


def _key() -> dict[str, str]:
    return {"Idempotency-Key": "m-" + uuid.uuid4().hex}


async def test_a_message_without_an_idempotency_key_is_428(strict_api: Api) -> None:
    cid = await _new(strict_api, "alice")
    r = await strict_api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": "count"}, headers=auth("alice")
    )
    assert r.status_code == 428, r.text
    assert r.json()["type"] == "IdempotencyKeyRequired"
    assert "Idempotency-Key" in r.json()["detail"]
    assert await strict_api.orch.store.messages(cid) == []


async def test_five_identical_posts_at_once_with_one_key_run_the_handler_once(
    strict_api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = tmp_path / "runs.txt"
    monkeypatch.setenv(_shop.RUNS_ENV, str(runs))
    cid = await _new(strict_api, "alice")
    headers = {**auth("alice"), "Idempotency-Key": "pay-1"}
    answers = await asyncio.gather(
        *(
            strict_api.client.post(
                f"/v1/conversations/{cid}/messages", json={"text": "count"}, headers=headers
            )
            for _ in range(5)
        )
    )
    ok = [a for a in answers if a.status_code == 200]
    assert ok and all(a.status_code in (200, 409) for a in answers), [a.text for a in answers]
    assert len({a.json()["user_message_id"] for a in ok}) == 1
    assert len(runs.read_text().splitlines()) == 1


async def test_post_conversations_makes_an_unguessable_id_owned_by_the_caller(
    strict_api: Api,
) -> None:
    ids = {await _new(strict_api, "alice") for _ in range(20)}
    assert len(ids) == 20 and all(len(i) >= 24 for i in ids)
    cid = ids.pop()
    r = await strict_api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": "hello"},
        headers={**auth("alice"), **_key()},
    )
    assert r.status_code == 200, r.text
    r = await strict_api.client.post("/v1/conversations", headers=auth("alice"))
    assert r.status_code == 201, r.text  # An empty body is as good as `{}`.


async def test_never_made_and_another_users_ids_are_404_alike_everywhere(
    strict_api: Api,
) -> None:
    bobs = await _new(strict_api, "bob")
    r = await strict_api.client.post(
        f"/v1/conversations/{bobs}/messages", json={"text": "hi"}, headers={**auth("bob"), **_key()}
    )
    assert r.status_code == 200, r.text
    message_id = r.json()["user_message_id"]
    never = "a-2"
    answers = {}
    for cid in (bobs, never):
        answers[cid] = [
            await strict_api.client.post(
                f"/v1/conversations/{cid}/messages",
                json={"text": "hi"},
                headers={**auth("alice"), **_key()},
            ),
            await strict_api.client.get(f"/v1/conversations/{cid}/thread", headers=auth("alice")),
            await strict_api.client.get(
                f"/v1/conversations/{cid}/transcript", headers=auth("alice")
            ),
            await strict_api.client.post(
                f"/v1/conversations/{cid}/messages/{message_id}/edit",
                json={"text": "x"},
                headers=auth("alice"),
            ),
            await strict_api.client.post(
                f"/v1/conversations/{cid}/messages/{message_id}/regenerate", headers=auth("alice")
            ),
        ]
    for cid, got in answers.items():
        assert [a.status_code for a in got] == [404] * 5, (cid, [a.text for a in got])
    assert [a.json() for a in answers[bobs]] == [a.json() for a in answers[never]]
    # Nobody took `a-2` by writing first: it stays never made.
    assert await strict_api.orch.store.conversation(never) is None


async def test_client_ids_keep_todays_behaviour_when_allowed(api: Api) -> None:
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages", json={"text": "hello"}, headers=auth("u1")
    )
    assert r.status_code == 200, r.text
