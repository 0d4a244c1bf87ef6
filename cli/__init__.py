"""The `frontdesk` command line: the root app; each command group lives in its own module.

Every command runs inside the one error handler of `_errors.FrontdeskGroup`. The CLI sits
above the HTTP service and the orchestrator; nothing in the package imports it.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from frontdesk.cli import (
    audit,
    chat,
    conversations,
    db,
    evaluation,
    init,
    jobs,
    knowledge,
    memory,
    privacy,
    report,
    serve,
    test,
    thread,
)
from frontdesk.cli._errors import (
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


app.command("init")(init.init)
app.command("demo")(chat.demo)
app.command("chat")(chat.chat)
app.command("conversations")(conversations.conversations)
app.command("report")(report.report)
app.command("serve")(serve.serve)
app.command("worker")(jobs.worker)
app.add_typer(jobs.app, name="jobs", help="List, retry and cancel background jobs.")
app.command("test")(test.run_tests)
app.command("erase")(privacy.erase)
audit.app.command("retention")(privacy.retention)
audit.app.command("rotate-key")(privacy.rotate_key)
app.add_typer(thread.app, name="thread", help="Show and compact conversation threads.")
app.add_typer(audit.app, name="audit", help="Show, export, verify and replay the audit log.")
app.add_typer(
    evaluation.app, name="eval", help="Score triage and extraction on labelled data sets."
)
app.add_typer(db.app, name="db", help="Database schema migrations.")
app.add_typer(memory.app, name="memory", help="Show and forget what is remembered.")
app.add_typer(knowledge.app, name="knowledge", help="Add, list, search and remove documents.")


def main() -> None:
    """Entry point of the `frontdesk` console script."""
    app()
