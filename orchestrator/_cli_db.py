"""`frontdesk db ...`: schema migrations of the store's database."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from frontdesk.db import create_engine
from frontdesk.orchestrator._app import default_db
from frontdesk.schema import current_revisions, head_revisions, upgrade_schema

app = typer.Typer(help="db commands", no_args_is_help=True)

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: $FRONTDESK_DB or sqlite:///frontdesk.db)."),
]


async def _upgrade(url: str) -> tuple[tuple[str, ...] | None, tuple[str, ...], str]:
    engine = create_engine(url)
    try:
        before = await current_revisions(engine)
        after = await upgrade_schema(engine)
    finally:
        await engine.dispose()
    return before, after, engine.url.render_as_string(hide_password=True)


@app.command("upgrade")
def upgrade(db: DbOption = None) -> None:
    """Migrate the database schema to the version this frontdesk needs (head)."""
    before, after, shown = asyncio.run(_upgrade(db or default_db()))
    was = ", ".join(before) if before else ("empty" if before is None else "base")
    now = ", ".join(after)
    # Plain echo: a URL must not be wrapped across lines.
    if before == after:
        typer.echo(f"{shown}: already at {now} (head {', '.join(head_revisions())})")
    else:
        typer.echo(f"{shown}: upgraded {was} -> {now}")
