"""`create_app`: the FastAPI app over one Orchestrator (routes, pages, limits, health)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from importlib.resources import files
from typing import Any

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from frontdesk import metrics
from frontdesk.orchestrator import Orchestrator
from frontdesk.schema import current_revisions, head_revisions
from frontdesk.service import _api, _errors, _memories, _operator, _telemetry
from frontdesk.service._auth import TokenVerifier
from frontdesk.service._deps import Service
from frontdesk.service._limits import DEFAULT_MAX_BODY_BYTES, RateLimiter
from frontdesk.service._schemas import HealthOut, ReadyOut

WORKER_HEADER = "X-Frontdesk-Worker"
"""A random id of the worker process that answered (no pid, no host name): which worker
took a request, for load-balancing checks."""


class BodyLimit:
    """Refuse request bodies over `max_bytes` with 413, before the route reads them."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        body, more = b"", True
        after: list[Message] = []
        while more:  # Read it all first (small, by the limit), counting as it comes.
            message = await receive()
            if message["type"] != "http.request":
                after.append(message)  # The client went away: the route will see that.
                break
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
        messages: list[Message] = [
            {"type": "http.request", "body": body, "more_body": False},
            *after,
        ]

        async def replay() -> Message:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = JSONResponse(
            {
                "detail": f"the request body is over {self.max_bytes} bytes",
                "type": "RequestTooLarge",
            },
            status_code=413,
        )
        await response(scope, receive, send)


class NameTheWorker:
    """Add `X-Frontdesk-Worker: <this process's random id>` to every answer."""

    def __init__(self, app: ASGIApp, worker: str) -> None:
        self.app = app
        self.header = (WORKER_HEADER.lower().encode(), worker.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, named)


def _page(name: str) -> str:
    return (files("frontdesk.service") / "pages" / name).read_text(encoding="utf-8")


def create_app(
    orchestrator: Orchestrator,
    *,
    verifier: TokenVerifier,
    limiter: RateLimiter | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    owns_orchestrator: bool = False,
    metrics_route: bool = True,
) -> FastAPI:
    """The HTTP service over `orchestrator`.

    The app opens the orchestrator when it starts (so a bad database or an outdated schema
    stops it at once, with the message naming `frontdesk db upgrade`) and, when it
    `owns_orchestrator`, closes it when it stops.

    Args:
        verifier: Checks every `/v1` request's bearer token.
        limiter: A per-user rate limit (`TokenBucket`, `RedisTokenBucket`), or none.
        max_body_bytes: Larger request bodies are answered 413.
        owns_orchestrator: Close the orchestrator (and the limiter) on shutdown.
        metrics_route: Serve `GET /metrics` (when `prometheus_client` is installed);
            `False` when the metrics are served on a port of their own.
    """
    parts = Service(
        orchestrator=orchestrator,
        verifier=verifier,
        limiter=limiter,
        owns_orchestrator=owns_orchestrator,
    )
    heads = list(head_revisions())
    worker = secrets.token_hex(6)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await orchestrator.open()
        try:
            yield
        finally:
            if owns_orchestrator:
                await orchestrator.aclose()
                if limiter is not None:
                    await limiter.aclose()

    app = FastAPI(
        title="frontdesk",
        summary="Customer-service conversations through a system of experts.",
        version=_version(),
        lifespan=lifespan,
        docs_url=None,  # Swagger UI and ReDoc load scripts from a CDN: /openapi.json only
        redoc_url=None,
    )
    app.state.service = parts
    _errors.install(app)
    app.include_router(_api.router)
    app.include_router(_memories.router)
    app.include_router(_operator.router)
    if metrics_route and metrics.available():
        app.include_router(_telemetry.router)

    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(NameTheWorker, worker=worker)
    _telemetry.instrument(app)  # Server spans, when the `otel` extra is installed.

    @app.get("/healthz", response_model=HealthOut, tags=["health"])
    async def healthz() -> HealthOut:
        """The process is up."""
        return HealthOut(status="ok")

    @app.get(
        "/readyz",
        response_model=ReadyOut,
        tags=["health"],
        responses={503: {"model": ReadyOut, "description": "Not ready."}},
    )
    async def readyz() -> Any:
        """The database is reachable and its schema is the one this code needs."""
        try:
            current = await current_revisions(orchestrator.store.engine)
        except Exception:
            body = ReadyOut(
                status="unavailable", database="unreachable", schema_revision=[], head=heads
            )
            return JSONResponse(body.model_dump(), status_code=503)
        revision = sorted(current or ())
        ready = revision == sorted(heads)
        body = ReadyOut(
            status="ok" if ready else "outdated",
            database="reachable",
            schema_revision=revision,
            head=heads,
        )
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    chat, console = _page("chat.html"), _page("operator.html")

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def chat_page() -> HTMLResponse:
        return HTMLResponse(chat, headers=_PAGE_HEADERS)

    @app.get("/operator", response_class=HTMLResponse, include_in_schema=False)
    async def operator_page() -> HTMLResponse:
        return HTMLResponse(console, headers=_PAGE_HEADERS)

    return app


# The pages load nothing from elsewhere: their own inline script and style, the API on the
# same origin. The token is in the fragment, which the browser never sends.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
        "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def _version() -> str:
    try:
        return metadata.version("frontdesk")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source tree not installed
        return "0"
