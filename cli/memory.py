"""`frontdesk memory ...`: what is remembered about a user, and forgetting it."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from frontdesk.cli._options import (
    DbOption,
    app_option,
    db_url,
    id_column,
    json_option,
    print_table,
)
from frontdesk.devkit.app import DEFAULT_APP, load_app
from frontdesk.errors import UserError
from frontdesk.memory import Memory
from frontdesk.orchestrator import Orchestrator

app = typer.Typer(help="memory commands", no_args_is_help=True)

UserArg = Annotated[str, typer.Argument(help="The user id (as passed to handle(user_id=...)).")]
AppOption = Annotated[str, app_option("module:attr naming an Orchestrator (its audit settings).")]


def _open(app_spec: str, db: str | None) -> Orchestrator:
    return load_app(app_spec, model="offline", db=db_url(db))


def as_json(memory: Memory) -> dict[str, str | None]:
    """One fact as `memory show --json` prints it."""
    return {
        "id": memory.id,
        "text": memory.text,
        "key": memory.key,
        "source": memory.source,
        "trust": memory.trust,
        "kind": "past_conversation" if memory.is_past_conversation else "fact",
        "conversation_id": memory.conversation_id,
        "message_id": memory.message_id,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
    }


async def _memories(app_spec: str, db: str | None, user_id: str) -> list[Memory]:
    orch = _open(app_spec, db)
    try:
        return [*await orch.memories(user_id), *await orch.past_conversations(user_id)]
    finally:
        await orch.aclose()


@app.command("show")
def show(
    user: UserArg,
    db: DbOption = None,
    app_spec: AppOption = DEFAULT_APP,
    json_out: Annotated[bool, json_option("A JSON list on stdout.")] = False,
) -> None:
    """The user's current facts, the most recently updated first, then the summaries of
    their past conversations (`kind`: not facts)."""
    memories = asyncio.run(_memories(app_spec, db, user))
    if json_out:
        typer.echo(json.dumps([as_json(m) for m in memories], ensure_ascii=False, indent=2))
        return
    console = Console()
    if not memories:
        console.print(f"nothing is remembered about {escape(user)!s}")
        return
    table = Table()
    id_column(table, "id", [m.id for m in memories])
    for name in ("fact", "key", "source", "trust", "updated"):
        table.add_column(name, no_wrap=name == "updated")
    for m in memories:
        table.add_row(
            m.id,
            escape(("past conversation: " if m.is_past_conversation else "") + m.text),
            escape(m.key or "-"),
            m.source,
            m.trust,
            m.updated_at.isoformat("T", "seconds"),
        )
    print_table(table, console)


async def _forget(app_spec: str, db: str | None, user_id: str, memory_id: str | None) -> int:
    orch = _open(app_spec, db)
    try:
        if memory_id is None:
            return await orch.forget_all(user_id, by="cli")
        await orch.forget(user_id, memory_id, by="cli")
        return 1
    finally:
        await orch.aclose()


@app.command("forget")
def forget(
    user: UserArg,
    memory_id: Annotated[
        str | None, typer.Argument(help="The fact's id (`frontdesk memory show USER`).")
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Forget every fact about the user.")] = False,
    db: DbOption = None,
    app_spec: AppOption = DEFAULT_APP,
) -> None:
    """Delete one fact (ID) or every fact (--all) about the user; the audit log records
    that they were forgotten, never their text."""
    if (memory_id is None) == (not every):
        raise UserError("give one memory id or --all (not both)")
    count = asyncio.run(_forget(app_spec, db, user, memory_id))
    Console().print(f"forgot {count} fact{'s' if count != 1 else ''} about {escape(user)}")
