"""`frontdesk db ...`: schema migrations of the store's database, and its application role."""

from __future__ import annotations

import asyncio
import os
from typing import Annotated

import typer
from rich.console import Console

from frontdesk.cli._options import DbOption, db_url
from frontdesk.db import create_engine
from frontdesk.roles import DEFAULT_ROLE, apply_role
from frontdesk.schema import current_revisions, head_revisions, upgrade_schema

app = typer.Typer(help="db commands", no_args_is_help=True)


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
    before, after, shown = asyncio.run(_upgrade(db_url(db)))
    was = ", ".join(before) if before else ("empty" if before is None else "base")
    now = ", ".join(after)
    # Plain echo: a URL must not be wrapped across lines.
    if before == after:
        typer.echo(f"{shown}: already at {now} (head {', '.join(head_revisions())})")
    else:
        typer.echo(f"{shown}: upgraded {was} -> {now}")


async def _roles(url: str, role: str, password: str | None, apply: bool) -> list[str]:
    engine = create_engine(url)
    try:
        return await apply_role(engine, role, password=password, apply=apply)
    finally:
        await engine.dispose()


@app.command("roles")
def roles(
    role: Annotated[
        str, typer.Option("--role", help="The application's role name.")
    ] = DEFAULT_ROLE,
    password_env: Annotated[
        str | None,
        typer.Option(
            "--password-env",
            help="Environment variable holding the role's password (never a command argument).",
        ),
    ] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Run the statements (as the tables' owner).")
    ] = False,
    db: DbOption = None,
) -> None:
    """Print (or, with --apply, run) the SQL of a least-privilege application role.

    The role may read and write conversations, append audit rows and read heads; it has no
    TRUNCATE, no DDL, and no UPDATE or DELETE on the audit tables. Run it again after
    `frontdesk db upgrade`, so new tables get their grants. PostgreSQL only.
    """
    console = Console(stderr=True)
    password = None
    if password_env is not None:
        password = os.environ.get(password_env)
        if not password:
            console.print(f"[red]error:[/red] ${password_env} is not set or empty")
            raise typer.Exit(2)
    statements = asyncio.run(_roles(db_url(db), role, password, apply))
    # Plain echo: statements must not be wrapped across lines.
    for sql in statements:
        typer.echo(f"{sql};")
    if apply:
        console.print(f"role {role} now has the application's privileges only")
