"""`frontdesk thread ...` commands."""

from __future__ import annotations

import typer

app = typer.Typer(help="thread commands", no_args_is_help=True)
