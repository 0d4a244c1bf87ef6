"""What `frontdesk serve` runs: settings from the environment, the app factory uvicorn's
workers call, and the two steps of the command (`prepare_serve`, then `run_serve`).

The command's options are declared by the CLI (`frontdesk.cli.serve`), which calls these
two steps and prints what there is to print; this module prints nothing.

uvicorn's workers are separate processes that import the app by name, so everything the
command line says reaches them as environment variables:

    FRONTDESK_SERVE_APP      --app mod:attr (an Orchestrator or a function returning one)
    FRONTDESK_SERVE_DB       --db URL, given to the app as its store
    FRONTDESK_SERVE_MODEL    --model SPEC
    FRONTDESK_JWT_SECRET     HS256 key            FRONTDESK_JWT_PUBLIC_KEY  RS256 key (PEM/path)
    FRONTDESK_JWT_AUDIENCE   required `aud`       FRONTDESK_JWT_ISSUER      required `iss`
    FRONTDESK_RATE_LIMIT     per user, e.g. 240/minute (default), or off
    FRONTDESK_REDIS_URL      keep the rate limit in Redis (shared by every worker)
    FRONTDESK_MAX_BODY_BYTES request body limit (default 262144)
    FRONTDESK_SERVE_METRICS_PORT  --metrics-port: `/metrics` is served there, not by the workers

Before the workers start, `prepare_serve` fails closed (`service/_startup.py`: no master key
without `--allow-clear-audit`, no offline stand-in unless named) and says what will run.
With several workers, `run_serve` puts `prometheus_client` in multiprocess mode
(`PROMETHEUS_MULTIPROC_DIR`, a fresh folder removed at exit) so that a scrape of any worker
counts them all.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

from fastapi import FastAPI

from frontdesk import metrics
from frontdesk.errors import ConfigError
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.app import DEFAULT_APP, default_db, load_app
from frontdesk.service._app import create_app
from frontdesk.service._auth import OPERATOR_ROLE, TokenVerifier, mint_token
from frontdesk.service._limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_RATE_LIMIT,
    RateLimit,
    RateLimiter,
    RedisTokenBucket,
    TokenBucket,
)
from frontdesk.service._startup import Startup, describe, refuse_unsafe
from frontdesk.service._telemetry import serve_metrics

FACTORY = "frontdesk.service._factory:app_from_env"
"""The import string uvicorn's workers build the app from."""

METRICS_PORT_ENV = "FRONTDESK_SERVE_METRICS_PORT"
DEMO_TOKEN_TTL = 12 * 3600.0
WORKER_HEALTHCHECK_SECONDS = 60


@dataclass(frozen=True)
class ServiceSettings:
    """The service's settings, as read from the environment (see the module docstring)."""

    app: str
    db: str | None
    model: str | None
    verifier: TokenVerifier
    rate_limit: RateLimit | None
    redis_url: str | None
    max_body_bytes: int
    metrics_apart: bool = False
    """`/metrics` is served on a port of its own (`--metrics-port`), not by the workers."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServiceSettings:
        """Read and check every setting.

        Raises:
            ConfigError: a missing key, a bad rate limit or body limit.
        """
        env = os.environ if environ is None else environ
        raw_body = env.get("FRONTDESK_MAX_BODY_BYTES") or str(DEFAULT_MAX_BODY_BYTES)
        if not raw_body.isdigit() or int(raw_body) < 1024:
            raise ConfigError(
                f"FRONTDESK_MAX_BODY_BYTES={raw_body!r}: expected a number of bytes >= 1024"
            )
        return cls(
            app=env.get("FRONTDESK_SERVE_APP") or DEFAULT_APP,
            db=env.get("FRONTDESK_SERVE_DB") or None,
            model=env.get("FRONTDESK_SERVE_MODEL") or None,
            verifier=TokenVerifier.from_env(env),
            rate_limit=RateLimit.parse(env.get("FRONTDESK_RATE_LIMIT", DEFAULT_RATE_LIMIT)),
            redis_url=env.get("FRONTDESK_REDIS_URL") or None,
            max_body_bytes=int(raw_body),
            metrics_apart=bool(env.get(METRICS_PORT_ENV)),
        )

    def limiter(self) -> RateLimiter | None:
        """The rate limiter these settings ask for."""
        if self.rate_limit is None:
            return None
        if self.redis_url:
            return RedisTokenBucket(self.rate_limit, self.redis_url)
        return TokenBucket(self.rate_limit)

    def orchestrator(self) -> Orchestrator:
        """The app `--app` names, on the store `--db` names."""
        db = self.db or default_db()
        orch = load_app(self.app, model=self.model, db=db)
        orch.use_store(db)
        return orch


def app_from_env() -> FastAPI:
    """The app a uvicorn worker serves (`uvicorn --factory`), from the environment."""
    settings = ServiceSettings.from_env()
    return create_app(
        settings.orchestrator(),
        verifier=settings.verifier,
        limiter=settings.limiter(),
        max_body_bytes=settings.max_body_bytes,
        owns_orchestrator=True,
        metrics_route=not settings.metrics_apart,
    )


def _base_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    shown = "[::1]" if shown == "::" else shown
    return f"http://{shown}:{port}"


def demo_urls(host: str, port: int, *, environ: MutableMapping[str, str]) -> tuple[str, str]:
    """A customer and an operator page URL, each with a fresh HS256 token (DEV ONLY).

    With no key configured, a random secret is made for this run and put in `environ`
    (the workers inherit it).

    Raises:
        ConfigError: the service checks RS256 tokens only: it cannot mint them.
    """
    secret = environ.get("FRONTDESK_JWT_SECRET")
    if not secret:
        if environ.get("FRONTDESK_JWT_PUBLIC_KEY"):
            raise ConfigError(
                "--demo-tokens mints HS256 tokens, but only FRONTDESK_JWT_PUBLIC_KEY (RS256) "
                "is set: set FRONTDESK_JWT_SECRET too, or mint tokens with your own key"
            )
        secret = environ["FRONTDESK_JWT_SECRET"] = secrets.token_urlsafe(32)
    base = _base_url(host, port)
    customer = mint_token(secret, "demo-customer", ttl=DEMO_TOKEN_TTL)
    operator = mint_token(secret, "demo-operator", roles=[OPERATOR_ROLE], ttl=DEMO_TOKEN_TTL)
    return f"{base}/#token={customer}", f"{base}/operator#token={operator}"


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """What `prepare_serve` checked: for the CLI to print and `run_serve` to run."""

    demo_urls: tuple[str, str] | None
    """The customer and operator page URLs (`--demo-tokens`), else `None`."""
    lines: list[str]
    """One line each: models per expert, store, audit encryption, job mode, workers."""
    orchestrator: Orchestrator
    """The app as the checks built it (unopened); it serves `--metrics-port`'s scrapes."""


def prepare_serve(
    *,
    app: str,
    db: str | None,
    model: str | None,
    host: str,
    port: int,
    workers: int,
    demo_tokens: bool,
    allow_clear_audit: bool = False,
    metrics_port: int | None = None,
) -> Prepared:
    """Check `frontdesk serve`'s settings and hand them to the workers (the environment),
    before any worker starts; with `demo_tokens`, mint the demo page URLs (DEV ONLY).

    Raises:
        ConfigError: a setting the workers could not start with (said before any starts):
            first of all no master key without `allow_clear_audit` (which `demo_tokens`
            implies), and the offline stand-in by default.
    """
    if workers < 1:
        raise ConfigError(f"--workers {workers}: at least 1")
    store = db or default_db()
    os.environ["FRONTDESK_SERVE_APP"] = app
    os.environ["FRONTDESK_SERVE_DB"] = store
    if model:
        os.environ["FRONTDESK_SERVE_MODEL"] = model
    if metrics_port is not None:
        if metrics_port == port or not 0 < metrics_port < 65536:
            raise ConfigError(f"--metrics-port {metrics_port}: a free port other than --port")
        os.environ[METRICS_PORT_ENV] = str(metrics_port)
    # The app loads (a bad --app or --db is said here, once), and fails closed.
    orch = load_app(app, model=model, db=store)
    orch.use_store(store)
    startup = Startup(db=store, workers=workers, allow_clear_audit=allow_clear_audit or demo_tokens)
    refuse_unsafe(orch, startup)
    urls = demo_urls(host, port, environ=os.environ) if demo_tokens else None
    ServiceSettings.from_env()  # Every other setting: the token keys, the limits.
    return Prepared(demo_urls=urls, lines=describe(orch, startup), orchestrator=orch)


def run_serve(
    prepared: Prepared,
    *,
    host: str,
    port: int,
    workers: int,
    log_level: str,
    metrics_port: int | None = None,
) -> None:
    """Run uvicorn with `workers` processes, each building the app from the environment
    `prepare_serve` filled (`FACTORY`); and `/metrics` on `metrics_port` if given."""
    import uvicorn

    folder = None
    if workers > 1 and not os.environ.get(metrics.MULTIPROCESS_ENV):
        # Set before the workers start (they import prometheus_client with it).
        folder = os.environ[metrics.MULTIPROCESS_ENV] = tempfile.mkdtemp(
            prefix="frontdesk-metrics-"
        )
    try:
        if metrics_port is not None:
            serve_metrics(prepared.orchestrator, host=host, port=metrics_port)
        uvicorn.run(
            FACTORY,
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            lifespan="on",
            timeout_graceful_shutdown=10,
            # A worker imports the whole stack before it answers its first health check: on a
            # busy small machine that is more than uvicorn's 5 s, and it would be killed.
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
        )
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
