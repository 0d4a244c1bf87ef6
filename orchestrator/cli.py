"""The `frontdesk` command line: the root app; each command group lives in its own module.

Every command runs inside the one error handler of `_cli_errors.FrontdeskGroup`.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from frontdesk.orchestrator import (
    _cli_audit,
    _cli_chat,
    _cli_db,
    _cli_jobs,
    _cli_list,
    _cli_memory,
    _cli_privacy,
    _cli_serve,
    _cli_thread,
)
from frontdesk.orchestrator._cli_errors import (
    TRACEBACK_KEY,
    FrontdeskGroup,
    configure_logging,
    keep_logging_config,
)

app = typer.Typer(
    cls=FrontdeskGroup,
    help="frontdesk: customer-service conversations through a system of experts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    traceback: Annotated[
        bool,
        typer.Option(
            "--traceback", help="Show the Python traceback of a failure (or FRONTDESK_DEBUG=1)."
        ),
    ] = False,
) -> None:
    """frontdesk: customer-service conversations through a system of experts."""
    ctx.meta[TRACEBACK_KEY] = traceback
    keep_logging_config(ctx)
    # Log lines go to stderr; stdout is the command's output. `chat` narrows this further.
    configure_logging()
    # Like uvicorn, `--app mod:attr` can name a module in the working directory.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


app.command("demo")(_cli_chat.demo)
app.command("chat")(_cli_chat.chat)
app.command("conversations")(_cli_list.conversations)
app.command("serve")(_cli_serve.serve)
app.command("worker")(_cli_jobs.worker)
app.add_typer(_cli_jobs.app, name="jobs", help="List, retry and cancel background jobs.")
app.command("erase")(_cli_privacy.erase)
_cli_audit.app.command("retention")(_cli_privacy.retention)
_cli_audit.app.command("rotate-key")(_cli_privacy.rotate_key)
app.add_typer(_cli_thread.app, name="thread", help="Show and compact conversation threads.")
app.add_typer(_cli_audit.app, name="audit", help="Show, export, verify and replay the audit log.")
app.add_typer(_cli_db.app, name="db", help="Database schema migrations.")
app.add_typer(_cli_memory.app, name="memory", help="Show and forget what is remembered.")


def main() -> None:
    """Entry point of the `frontdesk` console script."""
    app()
