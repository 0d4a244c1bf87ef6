"""Fixtures for the service: a token minter, and the app over the test shop on a fresh store
(SQLite and PostgreSQL), called in process through httpx's ASGI transport."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from frontdesk import Orchestrator
from frontdesk.service import TokenBucket, TokenVerifier, create_app, mint_token
from frontdesk.service._admission import Admission
from frontdesk.service._limits import RateLimit, RateLimiter
from tests.service import _shop

SECRET = "s" * 16 + "e" * 16 + "cret"  # 36 bytes: long enough for HS256


def token(user: str, *, roles: tuple[str, ...] = (), ttl: float = 600) -> str:
    return mint_token(SECRET, user, roles=roles, ttl=ttl)


def auth(user: str, *, roles: tuple[str, ...] = ()) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user, roles=roles)}"}


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'service.db'}"
    else:
        yield request.getfixturevalue("session_pg_url")


@dataclass
class Api:
    """The app, its orchestrator and a client; `cid()` makes a fresh conversation id."""

    app: FastAPI
    orch: Orchestrator
    client: httpx.AsyncClient

    @staticmethod
    def cid() -> str:
        return "c-" + uuid.uuid4().hex[:12]


async def open_api(
    orch: Orchestrator,
    *,
    limiter: RateLimiter | None = None,
    max_body_bytes: int = 64 * 1024,
    strict: bool = False,
    admission: Admission | None = None,
) -> AsyncIterator[Api]:
    """The app over `orch`; `strict` is the service's default policy (428 without an
    `Idempotency-Key`, ids made only by `POST /v1/conversations`), else the policy the
    `--allow-missing-idempotency-key --allow-client-conversation-ids` options keep for
    existing clients (what most tests here exercise)."""
    app = create_app(
        orch,
        allow_missing_idempotency_key=not strict,
        allow_client_conversation_ids=not strict,
        verifier=TokenVerifier(secret=SECRET),
        limiter=limiter,
        max_body_bytes=max_body_bytes,
        owns_orchestrator=True,
        admission=admission,
    )
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            yield Api(app=app, orch=orch, client=client)


@pytest.fixture
async def api(store_url: str) -> AsyncIterator[Api]:
    async for opened in open_api(_shop.build(store_url)):
        yield opened


@pytest.fixture
async def strict_api(store_url: str) -> AsyncIterator[Api]:
    """The api with the service's default policy (see `open_api`)."""
    async for opened in open_api(_shop.build(store_url), strict=True):
        yield opened


@pytest.fixture
def limited() -> Callable[..., Any]:
    """An api with a tight rate limit: `async with limited(n, per) as api`."""

    def make(requests: int, per: float, store: str) -> AsyncIterator[Api]:
        return open_api(_shop.build(store), limiter=TokenBucket(RateLimit(requests, per)))

    return make
