"""`frontdesk audit ...` commands."""

from __future__ import annotations

import typer

app = typer.Typer(help="audit commands", no_args_is_help=True)
