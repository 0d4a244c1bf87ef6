"""`create_app`: the FastAPI app over one Orchestrator (routes, pages, limits, health)."""

from __future__ import annotations

import html
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib import metadata
from importlib.resources import files
from typing import Any

import structlog
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from frontdesk import metrics
from frontdesk.orchestrator import Orchestrator
from frontdesk.schema import current_revisions, head_revisions
from frontdesk.service import _api, _errors, _events, _memories, _operator, _telemetry
from frontdesk.service._admission import Admission
from frontdesk.service._auth import TokenVerifier
from frontdesk.service._deps import Service
from frontdesk.service._limits import DEFAULT_MAX_BODY_BYTES, RateLimiter
from frontdesk.service._schemas import HealthOut, ReadyOut

log = structlog.get_logger("frontdesk.service")

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


class NoStoreNoSniff:
    """`Cache-Control: no-store` and `X-Content-Type-Options: nosniff` on every answer
    that does not set its own: API answers hold personal data that no shared cache or
    browser history may keep, and none may be sniffed into HTML."""

    HEADERS = ((b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"))

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                headers += [(n, v) for n, v in self.HEADERS if n not in present]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def default_greeting(business_name: str) -> str:
    """The chat page's first line when the app gives none."""
    if business_name == "the business":  # no name given
        return "Hello! How can we help you today?"
    return f"Hello, welcome to {business_name}! How can we help you today?"


def _page(name: str) -> str:
    return (files("frontdesk.service") / "pages" / name).read_text(encoding="utf-8")


def create_app(
    orchestrator: Orchestrator,
    *,
    verifier: TokenVerifier,
    limiter: RateLimiter | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    owns_orchestrator: bool = False,
    event_timing: _events.StreamTiming | None = None,
    allow_missing_idempotency_key: bool = False,
    allow_client_conversation_ids: bool = False,
    metrics_route: bool = True,
    greeting: str | None = None,
    admission: Admission | None = None,
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
        event_timing: How often the `/events` streams poll the store, and their
            keep-alive interval (`StreamTiming()` by default).
        allow_missing_idempotency_key: Answer messages without `Idempotency-Key` (else 428).
        allow_client_conversation_ids: A first message creates the conversation it names
            (else only `POST /v1/conversations` makes ids; others are 404).
        metrics_route: Serve `GET /metrics` (when `prometheus_client` is installed);
            `False` when the metrics are served on a port of their own.
        greeting: What the chat page says first (default: a welcome naming the app's
            `business_name`); shown, never stored in the conversation.
        admission: How many turns this worker runs at once, and how long one over the
            limit waits before it is answered 503 (`Admission()`: twice the store's pool
            of connections, 2 s).
    """
    parts = Service(
        orchestrator=orchestrator,
        verifier=verifier,
        limiter=limiter,
        owns_orchestrator=owns_orchestrator,
        allow_missing_idempotency_key=allow_missing_idempotency_key,
        allow_client_conversation_ids=allow_client_conversation_ids,
        admission=admission or Admission(),
    )
    heads = list(head_revisions())
    worker = secrets.token_hex(6)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await orchestrator.open()
        gate = await parts.turn_gate()
        log.info("turns.admission", max_turns=gate.max_turns, queue_seconds=gate.queue_seconds)
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
    app.state.event_timing = event_timing or _events.StreamTiming()
    _errors.install(app)
    app.include_router(_api.router)
    app.include_router(_memories.router)
    app.include_router(_operator.router)
    app.include_router(_events.router)
    if metrics_route and metrics.available():
        app.include_router(_telemetry.router)

    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(NameTheWorker, worker=worker)
    app.add_middleware(NoStoreNoSniff)
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

    chat = _page("chat.html").replace(
        "{{greeting}}", html.escape(greeting or default_greeting(orchestrator.business_name))
    )
    console = _page("operator.html")
    assets = {name: _page(name) for name in PAGE_ASSETS}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def chat_page() -> HTMLResponse:
        return HTMLResponse(chat, headers=_PAGE_HEADERS)

    @app.get("/operator", response_class=HTMLResponse, include_in_schema=False)
    async def operator_page() -> HTMLResponse:
        return HTMLResponse(console, headers=_PAGE_HEADERS)

    @app.get("/pages/{name}", include_in_schema=False)
    async def page_asset(name: str) -> Response:
        """The pages' scripts and styles, as files (the CSP allows no inline code)."""
        if name not in assets:
            return JSONResponse({"detail": "no such file", "type": "NotFound"}, status_code=404)
        media = PAGE_ASSETS[name]
        return Response(assets[name], media_type=media, headers=_PAGE_HEADERS)

    return app


PAGE_ASSETS = {
    "chat.js": "text/javascript",
    "operator.js": "text/javascript",
    "pages.js": "text/javascript",
    "pages.css": "text/css",
}
"""The files beside the pages under `/pages/` (and in the wheel's package data)."""

# The pages load nothing from elsewhere and run no inline code: their scripts and styles
# are files of this origin, the API on the same origin. The token is in the fragment,
# which the browser never sends.
_PAGE_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; "
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
