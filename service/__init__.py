"""`frontdesk serve`: the HTTP service over an Orchestrator.

FastAPI on uvicorn, with bearer JWT auth (the user is the token's `sub`; operators by the
`roles` claim), JSON or SSE turns, a per-user rate limit, a limit on turns in flight per
worker, a body size limit, health checks, a customer chat page (`/`) and an operator
console (`/operator`). Needs the `serve` extra (`pip install 'frontdesk[serve]'`); see
docs/service.md.

    from frontdesk.service import TokenVerifier, create_app
    app = create_app(orch, verifier=TokenVerifier(secret=...))
"""

from frontdesk.errors import ServiceBusy
from frontdesk.service._admission import Admission
from frontdesk.service._app import WORKER_HEADER, create_app
from frontdesk.service._auth import OPERATOR_ROLE, Principal, TokenVerifier, mint_token
from frontdesk.service._factory import (
    Prepared,
    ServiceSettings,
    app_from_env,
    prepare_serve,
    run_serve,
)
from frontdesk.service._limits import RateLimit, RateLimiter, RedisTokenBucket, TokenBucket

__all__ = [
    "OPERATOR_ROLE",
    "WORKER_HEADER",
    "Admission",
    "Prepared",
    "Principal",
    "RateLimit",
    "RateLimiter",
    "RedisTokenBucket",
    "ServiceBusy",
    "ServiceSettings",
    "TokenBucket",
    "TokenVerifier",
    "app_from_env",
    "create_app",
    "mint_token",
    "prepare_serve",
    "run_serve",
]
