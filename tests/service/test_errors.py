"""Status codes that mean what docs/service.md says: outages 503 (never 500), unstorable
input 422 JSON on both backends, malformed JSON 400, and every answer a JSON body."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from frontdesk.errors import AuditWriteError, SpendLimitReached, StoreError, StoreUnavailable
from tests.service.conftest import Api, auth

pytestmark = pytest.mark.anyio

OPERATOR = ("operator",)


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
async def test_nan_and_infinity_are_422_with_a_json_body(api: Api, literal: str) -> None:
    r = await api.client.post(
        f"/v1/conversations/{api.cid()}/messages",
        content=f'{{"text": {literal}}}',
        headers={**auth("u1"), "Content-Type": "application/json", "Idempotency-Key": "k"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["type"] == "RequestValidationError"
    assert "input" not in r.json()["errors"][0]  # The value is never echoed.


async def test_malformed_json_is_400_as_documented(api: Api) -> None:
    r = await api.client.post(
        f"/v1/conversations/{api.cid()}/messages",
        content=b'{"text": "unterminated',
        headers={**auth("u1"), "Content-Type": "application/json", "Idempotency-Key": "k"},
    )
    assert r.status_code == 400, r.text
    assert r.json()["type"] == "MalformedJSON"


async def test_nul_anywhere_in_a_path_is_422_json_on_both_backends(api: Api) -> None:
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": "hello"},
        headers={**auth("u1"), "Idempotency-Key": "k1"},
    )
    assert r.status_code == 200, r.text
    message_id = r.json()["user_message_id"]
    nul = "%00"
    asks: list[tuple[str, str, dict[str, Any] | None, tuple[str, ...]]] = [
        ("GET", f"/v1/conversations/{cid}{nul}/transcript", None, ()),
        ("GET", f"/v1/conversations/{cid}{nul}/thread", None, ()),
        ("GET", f"/v1/conversations/{cid}{nul}/transcript", None, OPERATOR),
        ("POST", f"/v1/conversations/{cid}/messages/{message_id}{nul}/edit", {"text": "x"}, ()),
        ("POST", f"/v1/conversations/{cid}/messages/{message_id}{nul}/regenerate", None, ()),
        ("POST", f"/v1/conversations/{cid}{nul}/messages", {"text": "x"}, ()),
        ("DELETE", f"/v1/me/memories/m{nul}", None, ()),
        ("POST", f"/v1/users/u{nul}1/erase", None, ("operator", "privacy")),
        ("POST", f"/v1/conversations/{cid}{nul}/handoff", None, OPERATOR),
    ]
    for method, path, body, roles in asks:
        r = await api.client.request(
            method, path, json=body, headers={**auth("u1", roles=roles), "Idempotency-Key": "k2"}
        )
        assert r.status_code == 422, (path, r.text)
        assert r.json()["type"] == "InvalidInput", (path, r.text)


async def test_nul_in_the_text_is_422_on_both_backends(api: Api) -> None:
    r = await api.client.post(
        f"/v1/conversations/{api.cid()}/messages",
        json={"text": "a\u0000b"},
        headers={**auth("u1"), "Idempotency-Key": "k1"},
    )
    assert r.status_code == 422, r.text


@pytest.mark.parametrize(
    "outage",
    [
        StoreUnavailable("cannot reach the database"),
        StoreError("the commit failed"),
        AuditWriteError("the audit log cannot be written", conversation_id="c", events=0),
    ],
    ids=["store-unavailable", "store-error", "audit-write"],
)
async def test_a_store_or_audit_outage_is_503_with_retry_after_and_the_safe_reply(
    api: Api, monkeypatch: pytest.MonkeyPatch, outage: Exception
) -> None:
    async def down(*args: object, **kwargs: object) -> None:
        raise outage

    monkeypatch.setattr(api.orch, "handle", down)
    monkeypatch.setattr(api.orch, "transcript", down)
    for r in (
        await api.client.post(
            f"/v1/conversations/{api.cid()}/messages",
            json={"text": "hello"},
            headers={**auth("u1"), "Idempotency-Key": "k1"},
        ),
        await api.client.get(f"/v1/conversations/{api.cid()}/transcript", headers=auth("u1")),
    ):
        assert r.status_code == 503, r.text
        assert r.headers["Retry-After"] == "1"
        body = r.json()
        assert body["type"] == type(outage).__name__
        assert body["text"] and body["detail"] == body["text"]
        assert "database" not in body["text"] and "audit" not in body["text"]


async def test_a_spend_limit_is_429_with_retry_after(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def spent(*args: object, **kwargs: object) -> None:
        raise SpendLimitReached(
            "user 'u1' spent 2100 tokens",
            retry_after=3599.6,
            tokens=2100,
            cost_usd=0.0,
            user_id="u1",
            conversation_id="c",
        )

    monkeypatch.setattr(api.orch, "handle", spent)
    r = await api.client.post(
        f"/v1/conversations/{api.cid()}/messages",
        json={"text": "hello"},
        headers={**auth("u1"), "Idempotency-Key": "k1"},
    )
    assert r.status_code == 429, r.text
    assert r.headers["Retry-After"] == "3600"
    assert r.json()["type"] == "SpendLimitReached" and "2100" not in r.json()["detail"]


async def test_a_bug_is_a_json_500(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    async def bug(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(api.orch, "transcript", bug)
    # Starlette answers, then re-raises for the server's log: the client sees only the answer.
    transport = httpx.ASGITransport(app=api.app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        r = await client.get(f"/v1/conversations/{api.cid()}/transcript", headers=auth("u1"))
    assert r.status_code == 500
    assert r.json() == {"detail": "internal error", "type": "InternalError"}


@pytest.mark.parametrize("spelt", ["tenant/alice", "tenant%2Falice"])
async def test_a_user_id_with_a_slash_is_erasable(api: Api, spelt: str) -> None:
    cid = api.cid()
    r = await api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": "hello"},
        headers={**auth("tenant/alice"), "Idempotency-Key": "k1"},
    )
    assert r.status_code == 200, r.text
    officer = auth("op", roles=("operator", "privacy"))
    r = await api.client.post(f"/v1/users/{spelt}/erase", headers=officer)
    assert r.status_code == 200, r.text
    assert r.json()["user_id"] == "tenant/alice"
    assert r.json()["messages"] >= 2
    conversation = await api.orch.store.conversation(cid)
    assert conversation is not None and conversation.user_id != "tenant/alice"


async def test_api_answers_are_no_store_and_nosniff(api: Api) -> None:
    for r in (
        await api.client.get("/v1/me/memories", headers=auth("u1")),
        await api.client.get("/v1/me/memories"),  # 401
        await api.client.get("/healthz"),
        await api.client.get("/openapi.json"),
    ):
        assert r.headers["Cache-Control"] == "no-store", r.request.url
        assert r.headers["X-Content-Type-Options"] == "nosniff", r.request.url
