"""The `frontdesk` command line: the root app; each command group lives in its own module."""

from __future__ import annotations

import typer

from frontdesk.orchestrator import _cli_audit, _cli_chat, _cli_db, _cli_thread

app = typer.Typer(
    help="frontdesk: customer-service conversations through a system of experts.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("demo")(_cli_chat.demo)
app.command("chat")(_cli_chat.chat)
app.add_typer(_cli_thread.app, name="thread", help="Show and compact conversation threads.")
app.add_typer(_cli_audit.app, name="audit", help="Show, export, verify and replay the audit log.")
app.add_typer(_cli_db.app, name="db", help="Database schema migrations.")


def main() -> None:
    """Entry point of the `frontdesk` console script."""
    app()
