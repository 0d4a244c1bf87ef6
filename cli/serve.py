"""`frontdesk serve`: the HTTP service (`frontdesk.service`) on uvicorn.

The command's options are declared here; what it runs is the service's (`prepare_serve`,
then `run_serve`). The service needs the `serve` extra, so it is imported only when the
command runs: every other command works without FastAPI installed.
"""

from __future__ import annotations

import importlib.util
from typing import Annotated

import typer

from frontdesk.cli._options import (
    DbOption,
    ModelOption,
    RetentionOption,
    RetentionTranscriptsOption,
    app_option,
)
from frontdesk.devkit.app import DEFAULT_APP
from frontdesk.errors import ConfigError


def _check_extra() -> None:
    """Raise ConfigError naming the `serve` extra when its packages are missing."""
    missing = [m for m in ("fastapi", "uvicorn", "jwt") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"frontdesk serve needs {', '.join(missing)}: pip install 'frontdesk[serve]'"
        )


def serve(
    app: Annotated[
        str, app_option("module:attribute of an Orchestrator (or a factory).")
    ] = DEFAULT_APP,
    db: DbOption = None,
    model: ModelOption = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    workers: Annotated[
        int, typer.Option("--workers", help="uvicorn worker processes (any may take any turn).")
    ] = 1,
    demo_tokens: Annotated[
        bool,
        typer.Option(
            "--demo-tokens",
            help="DEV ONLY: print a customer page URL and --operators desk URLs with HS256 tokens.",
        ),
    ] = False,
    operators: Annotated[
        int,
        typer.Option(
            "--operators",
            help="With --demo-tokens: how many operator desks (different operator ids).",
        ),
    ] = 2,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Check the whole configuration (options, keys, app, database) and exit: 0,"
            " or 2 with every problem on a line of its own.",
        ),
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's log level.")] = "info",
    allow_missing_idempotency_key: Annotated[
        bool,
        typer.Option(
            "--allow-missing-idempotency-key",
            help="Answer messages without Idempotency-Key (default 428: a retry without a "
            "key runs the handler again).",
        ),
    ] = False,
    allow_client_conversation_ids: Annotated[
        bool,
        typer.Option(
            "--allow-client-conversation-ids",
            help="A first message creates the conversation id it names (default: only "
            "POST /v1/conversations makes ids).",
        ),
    ] = False,
    max_token_lifetime: Annotated[
        int,
        typer.Option(
            "--max-token-lifetime",
            help="Refuse tokens valid for longer than this many seconds (0: no maximum).",
        ),
    ] = 86400,
    header_timeout: Annotated[
        float, typer.Option("--header-timeout", help="Seconds a client has to send headers.")
    ] = 10.0,
    body_timeout: Annotated[
        float, typer.Option("--body-timeout", help="Seconds a client has to send a body.")
    ] = 30.0,
    max_connections: Annotated[
        int, typer.Option("--max-connections", help="Open connections per worker (then 503).")
    ] = 512,
    allow_clear_audit: Annotated[
        bool,
        typer.Option(
            "--allow-clear-audit",
            help="Start without FRONTDESK_MASTER_KEY: audit payloads (customers' messages)"
            " stored in clear. Implied by --demo-tokens.",
        ),
    ] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            help="Serve GET /metrics (Prometheus) on this port only, not on the API port.",
        ),
    ] = None,
    jobs: Annotated[
        str,
        typer.Option(
            "--jobs",
            help="Run the background jobs inline (in each server process) or leave them to"
            " `frontdesk worker` processes (worker).",
        ),
    ] = "inline",
    retention: RetentionOption = None,
    retention_transcripts: RetentionTranscriptsOption = False,
    max_turns: Annotated[
        int | None,
        typer.Option(
            "--max-turns",
            help="Turns in flight per worker; one more waits --turn-queue-seconds, then 503"
            " with Retry-After, nothing stored (default: twice the store's connections).",
        ),
    ] = None,
    turn_queue_seconds: Annotated[
        float,
        typer.Option(
            "--turn-queue-seconds",
            help="How long a turn over --max-turns waits for a place before its 503 (0-60).",
        ),
    ] = 2.0,
) -> None:
    """Serve the HTTP API, the customer chat page (/) and the operator console (/operator).

    Every /v1 route needs `Authorization: Bearer <JWT>`: set FRONTDESK_JWT_SECRET (HS256)
    or FRONTDESK_JWT_PUBLIC_KEY (RS256). It refuses to start without FRONTDESK_MASTER_KEY
    (unless --allow-clear-audit) or on the offline stand-in unless named (--model offline).
    `--check` runs every check (and opens the database once) and exits, listing every
    problem at once. See docs/service.md and docs/operations.md.
    """
    _check_extra()
    from frontdesk.service import prepare_serve, run_serve

    prepared = prepare_serve(
        app=app,
        db=db,
        model=model,
        host=host,
        port=port,
        workers=workers,
        demo_tokens=demo_tokens,
        operators=operators,
        allow_missing_idempotency_key=allow_missing_idempotency_key,
        allow_client_conversation_ids=allow_client_conversation_ids,
        max_token_lifetime=max_token_lifetime,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        max_connections=max_connections,
        allow_clear_audit=allow_clear_audit,
        metrics_port=metrics_port,
        jobs=jobs,
        retention=retention,
        retention_transcripts=retention_transcripts,
        max_turns=max_turns,
        turn_queue_seconds=turn_queue_seconds,
    )
    if check:
        for line in prepared.lines:
            typer.echo(line)
        typer.echo("configuration OK")
        return
    if prepared.demo_urls is not None:
        typer.secho(
            "DEV ONLY --demo-tokens: anyone with these URLs is that user until the tokens "
            "expire (12 h). Never use it in production.",
            fg="yellow",
            err=True,
        )
        typer.echo(f"  customer chat:    {prepared.demo_urls.customer}")
        for who, url in prepared.demo_urls.operators:
            typer.echo(f"  operator desk ({who}): {url}")
    for line in prepared.lines:  # What runs: models, store, audit, jobs, workers.
        typer.echo(line, err=True)
    run_serve(
        prepared,
        host=host,
        port=port,
        workers=workers,
        log_level=log_level,
        metrics_port=metrics_port,
    )
