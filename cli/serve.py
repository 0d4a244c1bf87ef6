"""`frontdesk serve`: the HTTP service (`frontdesk.service`) on uvicorn.

The command's options are declared here; what it runs is the service's (`prepare_serve`,
then `run_serve`). The service needs the `serve` extra, so it is imported only when the
command runs: every other command works without FastAPI installed.
"""

from __future__ import annotations

import importlib.util
from typing import Annotated

import typer

from frontdesk.cli._options import DbOption, ModelOption, app_option
from frontdesk.errors import ConfigError
from frontdesk.orchestrator.app import DEFAULT_APP


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
            help="DEV ONLY: print a customer and an operator page URL with HS256 tokens.",
        ),
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn's log level.")] = "info",
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
) -> None:
    """Serve the HTTP API, the customer chat page (/) and the operator console (/operator).

    Every /v1 route needs `Authorization: Bearer <JWT>`: set FRONTDESK_JWT_SECRET (HS256)
    or FRONTDESK_JWT_PUBLIC_KEY (RS256). It refuses to start without FRONTDESK_MASTER_KEY
    (unless --allow-clear-audit) or on the offline stand-in unless named (--model offline).
    See docs/service.md and docs/operations.md.
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
        allow_clear_audit=allow_clear_audit,
        metrics_port=metrics_port,
    )
    if prepared.demo_urls is not None:
        customer, operator = prepared.demo_urls
        typer.secho(
            "DEV ONLY --demo-tokens: anyone with these URLs is that user until the tokens "
            "expire (12 h). Never use it in production.",
            fg="yellow",
            err=True,
        )
        typer.echo(f"  customer chat:    {customer}")
        typer.echo(f"  operator console: {operator}")
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
