"""The body size limit (413) and the per-user rate limit (429 with Retry-After), in process
and in Redis."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from frontdesk.errors import ConfigError
from frontdesk.service import RateLimit, RedisTokenBucket, TokenBucket
from tests.service import _shop
from tests.service.conftest import Api, auth, open_api

pytestmark = pytest.mark.anyio

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'limits.db'}"


async def test_a_body_over_the_limit_is_413(sqlite_url: str) -> None:
    async for api in open_api(_shop.build(sqlite_url), max_body_bytes=2048):
        url = f"/v1/conversations/{api.cid()}/messages"
        big = await api.client.post(url, json={"text": "x" * 3000}, headers=auth("u1"))
        assert big.status_code == 413
        assert await api.orch.store.conversation(url.split("/")[3]) is None

        async def chunks() -> Any:  # no Content-Length: counted as it arrives
            for _ in range(4):
                yield b"x" * 1000

        streamed = await api.client.post(url, content=chunks(), headers=auth("u1"))
        assert streamed.status_code == 413
        small = await api.client.post(url, json={"text": "hi"}, headers=auth("u1"))
        assert small.status_code == 200


async def _burst(api: Api, user: str, n: int) -> list[Any]:
    return [
        await api.client.get("/v1/conversations/nope/thread", headers=auth(user)) for _ in range(n)
    ]


async def test_the_rate_limit_is_per_user_with_retry_after(sqlite_url: str) -> None:
    limiter = TokenBucket(RateLimit(requests=3, per=60))
    async for api in open_api(_shop.build(sqlite_url), limiter=limiter):
        answers = await _burst(api, "alice", 4)
        assert [r.status_code for r in answers] == [404, 404, 404, 429]
        assert answers[-1].headers["retry-after"] == "20"  # one token every 20 s
        assert (await _burst(api, "bob", 1))[0].status_code == 404  # bob has his own bucket


async def test_the_bucket_refills_with_time() -> None:
    now = [0.0]
    bucket = TokenBucket(RateLimit(requests=2, per=1.0), clock=lambda: now[0])
    assert [await bucket.acquire("u") for _ in range(3)] == [0.0, 0.0, 0.5]
    now[0] = 0.5
    assert await bucket.acquire("u") == 0.0
    assert await bucket.acquire("u") == pytest.approx(0.5)


async def test_the_redis_bucket_is_shared_by_every_limiter() -> None:
    prefix = f"frontdesk-test:{uuid.uuid4().hex}:"
    limit = RateLimit(requests=3, per=30)
    first, second = (RedisTokenBucket(limit, REDIS_URL, prefix=prefix) for _ in range(2))
    try:
        waits = [await first.acquire("alice"), await second.acquire("alice")]
        waits += [await first.acquire("alice"), await second.acquire("alice")]
        assert waits[:3] == [0.0, 0.0, 0.0]
        assert 9.0 < waits[3] <= 10.0  # one token every 10 s, shared by both "workers"
        assert await first.acquire("bob") == 0.0
        client = aioredis.Redis.from_url(REDIS_URL)
        ttl = await client.pttl(prefix + "alice")
        await client.delete(prefix + "alice", prefix + "bob")
        await client.aclose()
        assert 0 < ttl <= 31_000  # keys expire once they would be full again
    finally:
        await first.aclose()
        await second.aclose()


async def test_the_service_limits_through_redis(sqlite_url: str) -> None:
    prefix = f"frontdesk-test:{uuid.uuid4().hex}:"
    limiter = RedisTokenBucket(RateLimit(requests=2, per=60), REDIS_URL, prefix=prefix)
    async for api in open_api(_shop.build(sqlite_url), limiter=limiter):
        answers = await _burst(api, "carol", 3)
        assert [r.status_code for r in answers] == [404, 404, 429]
        assert answers[-1].headers["retry-after"] == "30"


async def test_an_unreachable_redis_lets_requests_through() -> None:
    bucket = RedisTokenBucket(RateLimit(requests=1, per=60), "redis://127.0.0.1:1/0")
    try:
        assert [await bucket.acquire("u") for _ in range(3)] == [0.0, 0.0, 0.0]
    finally:
        await bucket.aclose()


@pytest.mark.parametrize(
    "text,expected",
    [
        ("120/minute", RateLimit(120, 60.0)),
        ("10/s", RateLimit(10, 1.0)),
        ("500/3600", RateLimit(500, 3600.0)),
        ("30/10s", RateLimit(30, 10.0)),
        ("off", None),
    ],
)
def test_rate_limit_settings_parse(text: str, expected: RateLimit | None) -> None:
    assert RateLimit.parse(text) == expected


@pytest.mark.parametrize("text", ["lots", "10/fortnight", "0/minute", "5/"])
def test_a_bad_rate_limit_setting_says_what_to_write(text: str) -> None:
    with pytest.raises(ConfigError, match="FRONTDESK_RATE_LIMIT"):
        RateLimit.parse(text)
