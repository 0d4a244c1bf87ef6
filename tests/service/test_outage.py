"""The database going away: every route answers 503 with `Retry-After` and a JSON error
naming the store (never 500), and what was stored before is still there after.

PostgreSQL is cut the way an outage cuts it: through a TCP relay that the test stops (every
open connection terminated, new ones refused) and starts again. SQLite is locked by another
connection holding its write lock past the busy timeout (in WAL mode reads go on beside
it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest

from frontdesk._driver import writer
from tests.service import _shop
from tests.service._relay import relay_to
from tests.service.conftest import Api, auth, open_api

pytestmark = pytest.mark.anyio

OPERATOR = ("operator",)


async def _say(api: Api, cid: str, text: str, key: str) -> httpx.Response:
    return await api.client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": text},
        headers={**auth("u1"), "Idempotency-Key": key},
    )


async def _every_route(api: Api, cid: str) -> dict[str, httpx.Response]:
    """One call to each route that reads or writes the store."""
    c = api.client
    op = auth("op", roles=OPERATOR)
    return {
        "POST messages": await _say(api, cid, "count two", "k2"),
        "GET transcript": await c.get(f"/v1/conversations/{cid}/transcript", headers=auth("u1")),
        "GET thread": await c.get(f"/v1/conversations/{cid}/thread", headers=auth("u1")),
        "GET memories": await c.get("/v1/me/memories", headers=auth("u1")),
        "DELETE memories": await c.delete("/v1/me/memories", headers=auth("u1")),
        "POST conversations": await c.post("/v1/conversations", json={}, headers=auth("u1")),
        "GET handoffs": await c.get("/v1/handoffs", headers=op),
        "POST handoff": await c.post(f"/v1/conversations/{cid}/handoff", headers=op),
        "GET context": await c.get(f"/v1/conversations/{cid}/context", headers=op),
    }


def _assert_all_503(answers: dict[str, httpx.Response], store: str) -> None:
    for route, r in answers.items():
        assert r.status_code == 503, (route, r.status_code, r.text)
        assert r.headers["Retry-After"].isdigit(), route
        body = r.json()
        assert body["type"] == "StoreUnavailable", (route, body)
        assert body["store"] == store, (route, body)
        assert body["text"] and "Traceback" not in r.text


async def _stored_before_is_there(api: Api, cid: str) -> None:
    r = await api.client.get(f"/v1/conversations/{cid}/transcript", headers=auth("u1"))
    assert r.status_code == 200, r.text
    texts = [m["content"] for m in r.json()["messages"]]
    assert texts[:2] == ["count one", "You said: count one."], texts


async def test_postgresql_terminated_and_refused_connections_are_503_never_500(
    session_pg_url: str,
) -> None:
    with relay_to(session_pg_url) as relay:
        async for api in open_api(_shop.build(relay.url(session_pg_url))):
            cid = api.cid()
            assert (await _say(api, cid, "count one", "k1")).status_code == 200
            relay.stop()  # open connections terminated, new ones refused
            _assert_all_503(await _every_route(api, cid), "postgresql")
            relay.start()
            await _stored_before_is_there(api, cid)
            again = await _say(api, cid, "count two", "k2")  # the retry the 503 asked for
            assert again.status_code == 200, again.text


async def test_sqlite_locked_past_the_busy_timeout_is_503_never_500(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "SQLITE_BUSY_TIMEOUT_MS", 200)  # the test's patience
    path = tmp_path / "locked.db"
    async for api in open_api(_shop.build(f"sqlite:///{path}")):
        cid = api.cid()
        assert (await _say(api, cid, "count one", "k1")).status_code == 200
        holder = sqlite3.connect(path, isolation_level=None, timeout=10)
        holder.execute("BEGIN IMMEDIATE")  # the write lock, held past the busy timeout
        try:
            answers = await _every_route(api, cid)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        # WAL: reads go on beside a held write lock; every write is refused, never a 500. An
        # operator's read of a customer's context is audited (a write): refused with them.
        writes = {"POST messages", "DELETE memories", "POST conversations", "POST handoff"}
        writes |= {"GET context"}
        _assert_all_503({k: r for k, r in answers.items() if k in writes}, "sqlite")
        assert all(r.status_code == 200 for k, r in answers.items() if k not in writes), {
            k: r.text for k, r in answers.items() if k not in writes
        }
        await _stored_before_is_there(api, cid)
        assert (await _say(api, cid, "count two", "k2")).status_code == 200
