"""The service's telemetry: the Prometheus scrape endpoint and the HTTP server spans.

`GET /metrics` needs no token: bind it where only Prometheus reaches it, or on a port of
its own with `frontdesk serve --metrics-port`.

The counters and histograms are the process's own (`frontdesk.metrics`; every worker's,
added up, in multiprocess mode). The hand-off queue is read from the database at each
scrape, so any worker answers the same; a database that cannot be read makes
`frontdesk_store_up` 0 and the scrape still succeeds.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import structlog
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response

from frontdesk import metrics
from frontdesk.orchestrator import Orchestrator
from frontdesk.service._deps import orchestrator
from frontdesk.threads.handoff import HandoffStore
from frontdesk.threads.resolution import ResolutionStore

log = structlog.get_logger("frontdesk.service")

UNTRACED_ROUTES = "/metrics,/healthz,/readyz"
"""Paths that get no server span (a scrape or a probe every few seconds is noise)."""

router = APIRouter(tags=["metrics"])


async def snapshot(orch: Orchestrator) -> metrics.OperationsSnapshot | None:
    """What the scrape reads from the database, or `None` when it cannot be read."""
    try:
        await orch.open()
        records = await HandoffStore(orch.store.engine).open_ones()
        conversations = await ResolutionStore(orch.store.engine).counts()
    except Exception as e:  # The scrape says so (frontdesk_store_up 0) rather than fail.
        log.warning("metrics.store_unreadable", error=type(e).__name__)
        return None
    now = datetime.now(UTC)
    waits = [r.waiting_seconds(now) for r in records]
    return metrics.OperationsSnapshot(
        handoff_queue_length=len(records),
        handoff_longest_wait_seconds=max(waits, default=0.0),
        conversations=conversations,
    )


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format."}},
)
async def scrape(request: Request) -> Response:
    """The metrics in the Prometheus text exposition format."""
    return await scrape_of(orchestrator(request))


async def scrape_of(orch: Orchestrator) -> Response:
    """The scrape's answer: the counted metrics and what `orch`'s database says now."""
    body = metrics.exposition(await snapshot(orch))
    return Response(content=body, media_type=metrics.CONTENT_TYPE)


def instrument(app: FastAPI) -> bool:
    """Add OpenTelemetry's FastAPI server spans to `app`, so that one trace runs from the
    HTTP request to the model calls (`frontdesk.turn` and `chat {model}` are its children).

    Returns whether it could: the instrumentation comes with `pip install 'frontdesk[otel]'`;
    without it the service runs untraced. With no tracer provider set it records nothing.
    """
    try:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    except ImportError:
        return False
    FastAPIInstrumentor.instrument_app(app, excluded_urls=UNTRACED_ROUTES)
    return True


def metrics_app(orch: Orchestrator) -> FastAPI:
    """An app that serves `GET /metrics` only (`frontdesk serve --metrics-port`), opening
    `orch` for the hand-off queue it reads at each scrape."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await orch.aclose()

    app = FastAPI(title="frontdesk metrics", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.get("/metrics", response_class=Response)
    async def scrape_here() -> Response:
        """The metrics in the Prometheus text exposition format."""
        return await scrape_of(orch)

    return app


def serve_metrics(orch: Orchestrator, *, host: str, port: int) -> threading.Thread:
    """Serve `metrics_app(orch)` on `host:port` from a thread of this process (the `serve`
    command's, beside uvicorn's workers); the thread ends with the process."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(metrics_app(orch), host=host, port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="frontdesk-metrics", daemon=True)
    thread.start()
    return thread
