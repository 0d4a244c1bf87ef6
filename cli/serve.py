"""`frontdesk serve`: the HTTP service (`frontdesk.service`) on uvicorn.

The service sits above the orchestrator, so this module names it only by its import
string, as uvicorn's workers do: the command's options are declared here and handed to
`frontdesk.service._factory:serve`, which needs the `serve` extra installed.
"""

from __future__ import annotations

import importlib.util
from typing import Annotated, Any

import typer

from frontdesk.errors import ConfigError
from frontdesk.orchestrator._app import DEFAULT_APP

SERVE = "frontdesk.service._factory:serve"


def _entry() -> Any:
    missing = [m for m in ("fastapi", "uvicorn", "jwt") if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(
            f"frontdesk serve needs {', '.join(missing)}: pip install 'frontdesk[serve]'"
        )
    from uvicorn.importer import import_from_string

    return import_from_string(SERVE)


def serve(
    app: Annotated[
        str, typer.Option("--app", help="module:attribute of an Orchestrator (or a factory).")
    ] = DEFAULT_APP,
    db: Annotated[
        str | None,
        typer.Option(
            "--db", help="Database URL (default: $FRONTDESK_DB or sqlite:///frontdesk.db)."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model spec, e.g. offline, anthropic:claude-sonnet-4-5."),
    ] = None,
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
) -> None:
    """Serve the HTTP API, the customer chat page (/) and the operator console (/operator).

    Every /v1 route needs `Authorization: Bearer <JWT>`: set FRONTDESK_JWT_SECRET (HS256)
    or FRONTDESK_JWT_PUBLIC_KEY (RS256). See docs/service.md.
    """
    _entry()(
        app=app,
        db=db,
        model=model,
        host=host,
        port=port,
        workers=workers,
        demo_tokens=demo_tokens,
        log_level=log_level,
    )
