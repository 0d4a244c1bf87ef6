"""`frontdesk serve --workers 2` on PostgreSQL: concurrent clients on the same and on
different conversations, idempotent retries landing on the other worker, streams on both."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from frontdesk.service import WORKER_HEADER
from tests.service._server import serve_process
from tests.service.conftest import SECRET, auth

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.processes,
    pytest.mark.postgres,
    pytest.mark.timeout(180),
]

SHARED_CLIENTS, SHARED_EACH = 4, 3  # clients posting at once to one conversation
SOLO_CONVERSATIONS, SOLO_EACH = 4, 3  # one client each, all at once


def fresh_client(url: str) -> httpx.AsyncClient:
    """No keep-alive: every request is a new connection, which either worker may accept."""
    return httpx.AsyncClient(
        base_url=url, timeout=60.0, limits=httpx.Limits(max_keepalive_connections=0)
    )


async def post(
    client: httpx.AsyncClient, cid: str, text: str, key: str, **headers: str
) -> httpx.Response:
    return await client.post(
        f"/v1/conversations/{cid}/messages",
        json={"text": text},
        headers={**auth("u-" + cid), "Idempotency-Key": key, **headers},
    )


def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    frames = [
        dict(line.split(": ", 1) for line in f.splitlines()) for f in body.strip().split("\n\n")
    ]
    return [(f["event"], json.loads(f["data"])) for f in frames]


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs.log"


def handler_runs(path: Path) -> Counter[str]:
    lines = path.read_text().splitlines() if path.exists() else []
    return Counter(line.split()[0] for line in lines)


async def test_two_workers_lose_nothing_and_replay_retries(fresh_pg_url: str, runs: Path) -> None:
    env = {
        "FRONTDESK_JWT_SECRET": SECRET,
        "FRONTDESK_TEST_RUNS": str(runs),
        "FRONTDESK_RATE_LIMIT": "off",
    }
    args = [
        "--workers",
        "2",
        "--db",
        fresh_pg_url,
        "--app",
        "tests.service._shop:build",
        "--allow-client-conversation-ids",
    ]
    with serve_process(args, env, workers=2) as (url, _process):
        async with fresh_client(url) as client:
            shared = "shared-" + uuid.uuid4().hex[:8]
            solos = [f"solo{i}-" + uuid.uuid4().hex[:8] for i in range(SOLO_CONVERSATIONS)]
            sent: dict[str, list[tuple[str, str]]] = {shared: []}  # cid -> [(text, key)]

            async def one_client(cid: str, name: str, each: int) -> list[httpx.Response]:
                answers = []
                for i in range(each):
                    text, key = f"count {name} message {i}", f"{name}-{i}"
                    sent.setdefault(cid, []).append((text, key))
                    answers.append(await post(client, cid, text, key))
                return answers

            jobs = [one_client(shared, f"client{c}", SHARED_EACH) for c in range(SHARED_CLIENTS)]
            jobs += [one_client(cid, cid, SOLO_EACH) for cid in solos]
            answered = [r for batch in await asyncio.gather(*jobs) for r in batch]

            assert [r.status_code for r in answered] == [200] * len(answered), [
                r.text for r in answered if r.status_code != 200
            ]
            workers = {r.headers[WORKER_HEADER] for r in answered}
            assert len(workers) == 2, "both workers should have taken turns"

            # Nothing lost or duplicated, and each transcript strictly alternates.
            for cid, messages in sent.items():
                r = await client.get(
                    f"/v1/conversations/{cid}/transcript", headers=auth("u-" + cid)
                )
                transcript = r.json()["messages"]
                roles = [m["role"] for m in transcript]
                assert roles == ["user", "assistant"] * len(messages), cid
                users = [m["content"] for m in transcript if m["role"] == "user"]
                assert sorted(users) == sorted(text for text, _ in messages)
                for question, answer in zip(transcript[::2], transcript[1::2], strict=True):
                    assert answer["parent_id"] == question["id"]
                    assert answer["content"] == f"You said: {question['content']}."
            total = sum(len(m) for m in sent.values())
            assert sum(handler_runs(runs).values()) == total  # each handler ran once

            # Retries with the same Idempotency-Key, until one lands on the other worker:
            # the stored reply comes back, and nothing runs again.
            by_key = {r.request.headers["Idempotency-Key"]: r for r in answered}
            crossed = 0
            for cid, messages in list(sent.items())[:3]:
                text, key = messages[0]
                original = by_key[key]
                for _ in range(100):  # the kernel picks the worker: try until it is the other
                    again = await post(client, cid, text, key)
                    assert again.status_code == 200 and again.json() == original.json()
                    if again.headers[WORKER_HEADER] != original.headers[WORKER_HEADER]:
                        crossed += 1
                        break
            assert crossed == 3
            assert sum(handler_runs(runs).values()) == total

            # A stream works whichever worker takes it.
            streamed_by: set[str] = set()
            for i in range(100):
                cid = f"stream{i}-" + uuid.uuid4().hex[:6]
                r = await post(
                    client, cid, f"count stream {i}", f"s-{i}", Accept="text/event-stream"
                )
                assert r.status_code == 200
                events = sse_events(r.text)
                assert events[0] == ("routed", {"category": "COUNT", "routed_by": "triage"})
                kind, done = events[-1]
                assert kind == "done" and done["text"] == f"You said: count stream {i}."
                assert "".join(d["text"] for k, d in events if k == "delta") == done["text"]
                streamed_by.add(r.headers[WORKER_HEADER])
                if len(streamed_by) == 2:
                    break
            assert len(streamed_by) == 2


def _turns_counted(scrape: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        s.value
        for family in text_string_to_metric_families(scrape)
        for s in family.samples
        if s.name == "frontdesk_turns_total" and s.labels.get("frontdesk_category") == "COUNT"
    )


async def test_a_scrape_of_either_worker_counts_every_workers_turns(fresh_pg_url: str) -> None:
    """`--workers 2` puts prometheus_client in multiprocess mode: no worker's count is lost."""
    env = {"FRONTDESK_JWT_SECRET": SECRET, "FRONTDESK_RATE_LIMIT": "off"}
    args = [
        "--workers",
        "2",
        "--db",
        fresh_pg_url,
        "--app",
        "tests.service._shop:build",
        "--allow-client-conversation-ids",  # The test names its conversations.
    ]
    with serve_process(args, env, workers=2) as (url, _process):
        async with fresh_client(url) as client:
            answered = await asyncio.gather(
                *(post(client, f"m{i}-" + uuid.uuid4().hex[:6], "count", f"k{i}") for i in range(8))
            )
            assert [r.status_code for r in answered] == [200] * 8
            scraped_by: set[str] = set()
            for _ in range(100):  # until both workers have answered a scrape
                scrape = await client.get("/metrics")
                assert scrape.status_code == 200
                assert _turns_counted(scrape.text) == 8
                scraped_by.add(scrape.headers[WORKER_HEADER])
                if len(scraped_by) == 2:
                    break
    # Both workers answered 8: each counts the other's turns too (whichever took them).
    assert len(scraped_by) == 2
