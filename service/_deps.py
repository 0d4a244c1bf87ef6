"""What every `/v1` route depends on: the service's parts, the caller, the rate limit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from frontdesk import metrics
from frontdesk.errors import InvalidToken
from frontdesk.orchestrator import Orchestrator
from frontdesk.service._auth import Principal, TokenVerifier
from frontdesk.service._limits import RateLimiter, retry_after_header


@dataclass
class Service:
    """The parts one app serves with (kept on `app.state.service`)."""

    orchestrator: Orchestrator
    verifier: TokenVerifier
    limiter: RateLimiter | None
    owns_orchestrator: bool


def service(request: Request) -> Service:
    found = request.app.state.service
    assert isinstance(found, Service)
    return found


def orchestrator(request: Request) -> Orchestrator:
    return service(request).orchestrator


_bearer = HTTPBearer(auto_error=False, description="A JWT: HS256 or RS256, with `exp` and `sub`.")


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The verified caller, after one token of their rate limit.

    Raises:
        InvalidToken: no bearer token, or one the verifier refuses (401).
        HTTPException: 429 with `Retry-After` when the caller's bucket is empty.
    """
    if credentials is None:
        raise InvalidToken("send `Authorization: Bearer <JWT>`")
    parts = service(request)
    principal = parts.verifier.verify(credentials.credentials)
    if parts.limiter is not None:
        wait = await parts.limiter.acquire(principal.user_id)
        if wait > 0:
            metrics.rate_limited()
            raise HTTPException(
                status_code=429,
                detail="too many requests; retry after the number of seconds in Retry-After",
                headers={"Retry-After": retry_after_header(wait)},
            )
    return principal


async def operator(principal: Annotated[Principal, Depends(caller)]) -> Principal:
    """The caller, who must hold the `operator` role (403 otherwise)."""
    if not principal.is_operator:
        raise HTTPException(status_code=403, detail="this route is for operators")
    return principal


Caller = Annotated[Principal, Depends(caller)]
Operator = Annotated[Principal, Depends(operator)]
Orch = Annotated[Orchestrator, Depends(orchestrator)]
