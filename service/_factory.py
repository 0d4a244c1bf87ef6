"""What `frontdesk serve` runs: settings from the environment, the app factory uvicorn's
workers call, and the two steps of the command (`prepare_serve`, then `run_serve`).

The command's options are declared by the CLI (`frontdesk.cli.serve`), which calls these
two steps and prints what there is to print; this module prints nothing.

uvicorn's workers are separate processes that import the app by name, so everything the
command line says reaches them as environment variables:

    FRONTDESK_SERVE_APP      --app mod:attr (an Orchestrator or a function returning one)
    FRONTDESK_SERVE_DB       --db URL, given to the app as its store
    FRONTDESK_SERVE_MODEL    --model SPEC
    FRONTDESK_SERVE_JOBS     --jobs inline|worker (where the background jobs run)
    FRONTDESK_SERVE_RETENTION  --retention AGE (retention as a periodic job), and
    FRONTDESK_SERVE_RETENTION_TRANSCRIPTS  --retention-transcripts (1)
    FRONTDESK_JWT_SECRET     HS256 key            FRONTDESK_JWT_PUBLIC_KEY  RS256 key (PEM/path)
    FRONTDESK_JWT_AUDIENCE   required `aud`       FRONTDESK_JWT_ISSUER      required `iss`
    FRONTDESK_RATE_LIMIT     per user, e.g. 240/minute (default), or off
    FRONTDESK_REDIS_URL      keep the rate limit in Redis (shared by every worker)
    FRONTDESK_MAX_BODY_BYTES request body limit (default 262144)
    FRONTDESK_EVENT_STREAM_SECONDS  how long one `/events` stream stays open before the
                             client reconnects with Last-Event-ID (default 300)
    FRONTDESK_MAX_TOKEN_LIFETIME  --max-token-lifetime seconds (default 86400, 0: none)
    FRONTDESK_ALLOW_MISSING_IDEMPOTENCY_KEY  --allow-missing-idempotency-key (1)
    FRONTDESK_ALLOW_CLIENT_CONVERSATION_IDS  --allow-client-conversation-ids (1)
    FRONTDESK_HEADER_TIMEOUT, FRONTDESK_BODY_TIMEOUT, FRONTDESK_MAX_CONNECTIONS
                             slow clients (frontdesk.service._timeouts)
    FRONTDESK_SERVE_METRICS_PORT  --metrics-port: `/metrics` is served there, not by the workers
    FRONTDESK_MAX_TURNS      --max-turns: turns in flight per worker (default: twice the
                             store's pool of connections)
    FRONTDESK_TURN_QUEUE_SECONDS  --turn-queue-seconds: how long a turn over it waits
                             before a 503 (default 2; frontdesk.service._admission)

Before the workers start, `prepare_serve` fails closed (`service/_startup.py`: no master key
without `--allow-clear-audit`, no offline stand-in unless named) and says what will run.
With several workers, `run_serve` puts `prometheus_client` in multiprocess mode
(`PROMETHEUS_MULTIPROC_DIR`, a fresh folder removed at exit) so that a scrape of any worker
counts them all.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TypeVar

from fastapi import FastAPI

from frontdesk import metrics
from frontdesk.audit.crypto import MASTER_KEY_ENV
from frontdesk.devkit.app import DEFAULT_APP, default_db, load_app
from frontdesk.errors import ConfigError
from frontdesk.jobs.runner import JOBS_MODES
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.erasure import retention_policy
from frontdesk.service._admission import DEFAULT_QUEUE_SECONDS, Admission
from frontdesk.service._app import create_app
from frontdesk.service._auth import OPERATOR_ROLE, TokenVerifier, mint_token
from frontdesk.service._events import StreamTiming
from frontdesk.service._limits import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_RATE_LIMIT,
    RateLimit,
    RateLimiter,
    RedisTokenBucket,
    TokenBucket,
)
from frontdesk.service._startup import NO_MASTER_KEY, Problems, Startup, describe, unsafe
from frontdesk.service._telemetry import serve_metrics
from frontdesk.threads.store import ConversationStore

FACTORY = "frontdesk.service._factory:app_from_env"
"""The import string uvicorn's workers build the app from."""

METRICS_PORT_ENV = "FRONTDESK_SERVE_METRICS_PORT"
DEMO_TOKEN_TTL = 12 * 3600.0
WORKER_HEALTHCHECK_SECONDS = 5
"""How long the supervisor waits for a started worker's health-check answer (uvicorn's
default). It was 60, and uvicorn waited that long on a worker killed mid-ping: a dead
worker stayed unreplaced for up to a minute. `Supervisor` also ends the wait when the
worker's process ends, and gives a worker still starting `STARTUP_SECONDS`."""


_N = TypeVar("_N", int, float)
_D = TypeVar("_D")


@dataclass(frozen=True)
class ServiceSettings:
    """The service's settings, as read from the environment (see the module docstring)."""

    app: str
    db: str | None
    model: str | None
    verifier: TokenVerifier
    jobs: str
    rate_limit: RateLimit | None
    redis_url: str | None
    max_body_bytes: int
    event_timing: StreamTiming = StreamTiming()
    allow_missing_idempotency_key: bool = False
    allow_client_conversation_ids: bool = False
    metrics_apart: bool = False
    """`/metrics` is served on a port of its own (`--metrics-port`), not by the workers."""
    retention: str | None = None
    """`--retention AGE`: retention as a periodic job (`None`: none)."""
    retention_transcripts: bool = False
    admission: Admission = Admission()
    """Turns in flight per worker, and how long one over the limit waits for a place."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServiceSettings:
        """Read and check every setting.

        Raises:
            ConfigError: a missing key, a bad rate limit or body limit.
        """
        env = os.environ if environ is None else environ
        problems = Problems()
        max_body = _number(
            env,
            "FRONTDESK_MAX_BODY_BYTES",
            problems,
            parse=int,
            default=DEFAULT_MAX_BODY_BYTES,
            low=1024,
            expected="a number of bytes >= 1024",
        )
        max_age = _number(
            env,
            "FRONTDESK_EVENT_STREAM_SECONDS",
            problems,
            parse=float,
            default=StreamTiming().max_age,
            low=1.0,
            high=86400.0,
            expected="seconds from 1 to 86400",
        )
        admission = _admission(env, problems)
        verifier = rate_limit = None
        with problems.check():
            verifier = TokenVerifier.from_env(env)
        with problems.check():
            rate_limit = RateLimit.parse(env.get("FRONTDESK_RATE_LIMIT", DEFAULT_RATE_LIMIT))
        problems.raise_found()
        assert verifier is not None
        return cls(
            app=env.get("FRONTDESK_SERVE_APP") or DEFAULT_APP,
            db=env.get("FRONTDESK_SERVE_DB") or None,
            model=env.get("FRONTDESK_SERVE_MODEL") or None,
            verifier=verifier,
            jobs=env.get("FRONTDESK_SERVE_JOBS") or "inline",
            rate_limit=rate_limit,
            redis_url=env.get("FRONTDESK_REDIS_URL") or None,
            max_body_bytes=max_body,
            event_timing=StreamTiming(max_age=max_age),
            allow_missing_idempotency_key=_flag(env, "FRONTDESK_ALLOW_MISSING_IDEMPOTENCY_KEY"),
            allow_client_conversation_ids=_flag(env, "FRONTDESK_ALLOW_CLIENT_CONVERSATION_IDS"),
            metrics_apart=bool(env.get(METRICS_PORT_ENV)),
            retention=env.get("FRONTDESK_SERVE_RETENTION") or None,
            retention_transcripts=_flag(env, "FRONTDESK_SERVE_RETENTION_TRANSCRIPTS"),
            admission=admission,
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
        if self.jobs not in JOBS_MODES:
            raise ConfigError(f"--jobs {self.jobs!r}: 'inline' or 'worker'")
        orch.use_jobs(self.jobs)
        _use_retention(orch, self.retention, self.retention_transcripts)
        return orch


def _use_retention(orch: Orchestrator, age: str | None, transcripts: bool) -> None:
    """`--retention AGE` on whatever `--app` built (it keeps its own when not given)."""
    if age:
        orch.use_retention(retention_policy(age, transcripts=transcripts))


def _admission(env: Mapping[str, str], problems: Problems) -> Admission:
    """`FRONTDESK_MAX_TURNS` (unset: from the pool) and `FRONTDESK_TURN_QUEUE_SECONDS`."""
    turns = _number(
        env,
        "FRONTDESK_MAX_TURNS",
        problems,
        parse=int,
        default=None,
        low=1,
        expected="a whole number of turns >= 1, or unset for twice the store's connections",
        flag="--max-turns",
    )
    queue = _number(
        env,
        "FRONTDESK_TURN_QUEUE_SECONDS",
        problems,
        parse=float,
        default=DEFAULT_QUEUE_SECONDS,
        low=0.0,
        high=60.0,
        expected="seconds from 0 to 60",
        flag="--turn-queue-seconds",
    )
    return Admission(max_turns=turns, queue_seconds=queue)


def _number(
    env: Mapping[str, str],
    name: str,
    problems: Problems,
    *,
    parse: Callable[[str], _N],
    default: _D,
    low: _N,
    high: _N | None = None,
    expected: str,
    flag: str | None = None,
) -> _N | _D:
    """The number setting `name` within [`low`, `high`]; `default` when unset. A value that
    is not such a number is added to `problems` (all are reported at once) and `default`
    stands in for it meanwhile."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not (low <= value and (high is None or value <= high)):  # NaN too.
        where = f"{name}={raw!r}" + (f" ({flag})" if flag else "")
        problems.add(f"{where}: expected {expected}")
        return default
    return value


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def app_from_env() -> FastAPI:
    """The app a uvicorn worker serves (`uvicorn --factory`), from the environment."""
    settings = ServiceSettings.from_env()
    return create_app(
        settings.orchestrator(),
        verifier=settings.verifier,
        limiter=settings.limiter(),
        max_body_bytes=settings.max_body_bytes,
        owns_orchestrator=True,
        event_timing=settings.event_timing,
        allow_missing_idempotency_key=settings.allow_missing_idempotency_key,
        allow_client_conversation_ids=settings.allow_client_conversation_ids,
        metrics_route=not settings.metrics_apart,
        admission=settings.admission,
    )


def _base_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    shown = "[::1]" if shown == "::" else shown
    return f"http://{shown}:{port}"


@dataclass(frozen=True)
class DemoUrls:
    """The page URLs `--demo-tokens` prints, each with a fresh token (DEV ONLY)."""

    customer: str
    operators: tuple[tuple[str, str], ...]
    """(operator id, desk URL) per operator: `demo-operator-1`, `demo-operator-2`, ..."""


def demo_urls(
    host: str, port: int, *, environ: MutableMapping[str, str], operators: int = 2
) -> DemoUrls:
    """A customer page URL and `operators` operator desk URLs (different operator ids), each
    with a fresh HS256 token (DEV ONLY): two desks are what a hand-off between two people
    needs to be tried.

    With no key configured, a random secret is made for this run and put in `environ`
    (the workers inherit it).

    Raises:
        ConfigError: the service checks RS256 tokens only: it cannot mint them; fewer than
            one operator.
    """
    if operators < 1:
        raise ConfigError(f"--operators {operators}: at least 1")
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
    desks = []
    for number in range(1, operators + 1):
        who = f"demo-operator-{number}"
        token = mint_token(secret, who, roles=[OPERATOR_ROLE], ttl=DEMO_TOKEN_TTL)
        desks.append((who, f"{base}/operator#token={token}"))
    return DemoUrls(customer=f"{base}/#token={customer}", operators=tuple(desks))


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """What `prepare_serve` checked: for the CLI to print and `run_serve` to run."""

    demo_urls: DemoUrls | None
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
    operators: int = 2,
    allow_missing_idempotency_key: bool = False,
    allow_client_conversation_ids: bool = False,
    max_token_lifetime: float | None = None,
    header_timeout: float | None = None,
    body_timeout: float | None = None,
    max_connections: int | None = None,
    allow_clear_audit: bool = False,
    metrics_port: int | None = None,
    jobs: str = "inline",
    retention: str | None = None,
    retention_transcripts: bool = False,
    check_store: bool = True,
    max_turns: int | None = None,
    turn_queue_seconds: float | None = None,
) -> Prepared:
    """Check `frontdesk serve`'s whole configuration and hand it to the workers (the
    environment), before any worker starts; with `demo_tokens`, mint the demo page URLs
    (DEV ONLY).

    Every check runs, so that one run names every problem (`serve --check`): the options,
    the app, what would fail open (no master key without `allow_clear_audit`, which
    `demo_tokens` implies; the offline stand-in by default), the token keys and limits,
    and the store (opened once, unless `check_store` is False; an empty database is set
    up, as the first worker would).

    Raises:
        ConfigError: the one problem found (a `StoreError` for a store that cannot be
            opened); `ConfigProblems` when several, one line each.
    """
    problems = Problems()
    if workers < 1:
        problems.add(f"--workers {workers}: at least 1")
    store = db or default_db()
    _to_environ(
        problems,
        app=app,
        store=store,
        model=model,
        port=port,
        allow_missing_idempotency_key=allow_missing_idempotency_key,
        allow_client_conversation_ids=allow_client_conversation_ids,
        max_token_lifetime=max_token_lifetime,
        limits=(
            ("FRONTDESK_HEADER_TIMEOUT", header_timeout),
            ("FRONTDESK_BODY_TIMEOUT", body_timeout),
            ("FRONTDESK_MAX_CONNECTIONS", max_connections),
        ),
        metrics_port=metrics_port,
        jobs=jobs,
        retention=retention,
        retention_transcripts=retention_transcripts,
        max_turns=max_turns,
        turn_queue_seconds=turn_queue_seconds,
    )
    startup = Startup(db=store, workers=workers, allow_clear_audit=allow_clear_audit or demo_tokens)
    # The app loads (a bad --app or --db is said here, once), and fails closed.
    orch: Orchestrator | None = None
    with problems.check():
        loaded = load_app(app, model=model, db=store)
        loaded.use_store(store)
        if jobs not in JOBS_MODES:
            raise ConfigError(f"--jobs {jobs!r}: 'inline' or 'worker'")
        loaded.use_jobs(jobs)
        _use_retention(loaded, retention, retention_transcripts)
        orch = loaded
    if orch is not None:
        for found in unsafe(orch, startup):
            problems.add(found)
    elif not startup.allow_clear_audit and not os.environ.get(MASTER_KEY_ENV):
        problems.add(NO_MASTER_KEY)  # Said even when --app cannot be loaded.
    urls = None
    if demo_tokens:
        with problems.check():
            urls = demo_urls(host, port, environ=os.environ, operators=operators)
    with problems.check():
        ServiceSettings.from_env()  # Every other setting: the token keys, the limits.
    if check_store and orch is not None:
        with problems.check():
            asyncio.run(_open_store(store))
    problems.raise_found()
    assert orch is not None
    lines = [*describe(orch, startup), _admission_line(max_turns, turn_queue_seconds)]
    return Prepared(demo_urls=urls, lines=lines, orchestrator=orch)


def _admission_line(max_turns: int | None, queue_seconds: float | None) -> str:
    turns = "twice the store's connections" if max_turns is None else str(max_turns)
    wait = DEFAULT_QUEUE_SECONDS if queue_seconds is None else queue_seconds
    return f"turns: at most {turns} at once per worker; one more waits {wait:g} s, then 503"


def _to_environ(
    problems: Problems,
    *,
    app: str,
    store: str,
    model: str | None,
    port: int,
    allow_missing_idempotency_key: bool,
    allow_client_conversation_ids: bool,
    max_token_lifetime: float | None,
    limits: tuple[tuple[str, float | None], ...],
    metrics_port: int | None,
    jobs: str,
    retention: str | None,
    retention_transcripts: bool,
    max_turns: int | None = None,
    turn_queue_seconds: float | None = None,
) -> None:
    """Hand the options to the workers (the environment); what cannot work goes to
    `problems`."""
    os.environ["FRONTDESK_SERVE_APP"] = app
    os.environ["FRONTDESK_SERVE_DB"] = store
    if model:
        os.environ["FRONTDESK_SERVE_MODEL"] = model
    if allow_missing_idempotency_key:
        os.environ["FRONTDESK_ALLOW_MISSING_IDEMPOTENCY_KEY"] = "1"
    if allow_client_conversation_ids:
        os.environ["FRONTDESK_ALLOW_CLIENT_CONVERSATION_IDS"] = "1"
    if max_token_lifetime is not None:
        os.environ["FRONTDESK_MAX_TOKEN_LIFETIME"] = str(int(max_token_lifetime))
    for name, value in limits:
        if value is not None:
            if value <= 0:
                problems.add(f"{name}={value}: must be more than 0")
            else:
                os.environ[name] = str(value)
    os.environ["FRONTDESK_SERVE_JOBS"] = jobs
    os.environ.pop("FRONTDESK_SERVE_RETENTION", None)
    os.environ.pop("FRONTDESK_SERVE_RETENTION_TRANSCRIPTS", None)
    if retention:
        os.environ["FRONTDESK_SERVE_RETENTION"] = retention
        if retention_transcripts:
            os.environ["FRONTDESK_SERVE_RETENTION_TRANSCRIPTS"] = "1"
    # Checked with every other setting by `ServiceSettings.from_env`.
    if max_turns is not None:
        os.environ["FRONTDESK_MAX_TURNS"] = str(max_turns)
    if turn_queue_seconds is not None:
        os.environ["FRONTDESK_TURN_QUEUE_SECONDS"] = str(turn_queue_seconds)
    if metrics_port is not None:
        if metrics_port == port or not 0 < metrics_port < 65536:
            problems.add(f"--metrics-port {metrics_port}: a free port other than --port")
        else:
            os.environ[METRICS_PORT_ENV] = str(metrics_port)


async def _open_store(url: str) -> None:
    """Open the store once (set up if empty), so that a store the workers could not open
    is said here, in one line, not as every worker's failed start."""
    store = await ConversationStore.open(url)
    await store.aclose()


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
    `prepare_serve` filled (`FACTORY`), every connection through `BoundedH11Protocol`
    (header and body deadlines, a connection cap); and `/metrics` on `metrics_port` if
    given."""
    import uvicorn

    from frontdesk.service._supervisor import STARTUP_SECONDS, Supervisor
    from frontdesk.service._timeouts import BoundedH11Protocol

    folder = None
    if workers > 1 and not os.environ.get(metrics.MULTIPROCESS_ENV):
        # Set before the workers start (they import prometheus_client with it).
        folder = os.environ[metrics.MULTIPROCESS_ENV] = tempfile.mkdtemp(
            prefix="frontdesk-metrics-"
        )
    try:
        if metrics_port is not None:
            serve_metrics(prepared.orchestrator, host=host, port=metrics_port)
        config = uvicorn.Config(
            FACTORY,
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            lifespan="on",
            timeout_graceful_shutdown=10,
            timeout_worker_healthcheck=WORKER_HEALTHCHECK_SECONDS,
            http=BoundedH11Protocol,  # header and body deadlines, a connection cap
        )
        if workers == 1:
            uvicorn.Server(config).run()
        else:  # A dead worker is replaced at once (see `Supervisor`).
            Supervisor(config, [config.bind_socket()], startup_seconds=STARTUP_SECONDS).run()
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
