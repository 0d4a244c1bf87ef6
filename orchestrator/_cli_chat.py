"""`frontdesk demo` and `frontdesk chat`: the potato shop end to end, and a REPL."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from frontdesk.masking import mask_url
from frontdesk.orchestrator._app import DEFAULT_APP, default_db, describe_models, load_app
from frontdesk.orchestrator.errors import InvalidUserText, TurnFailed
from frontdesk.orchestrator.reply import Reply

console = Console()

DEMO_TURNS = [
    "I'd like to buy a bag of purple potatoes",
    "Actually, I want to buy two bags",
    "actually maybe Idaho potatoes are better this time of year",
    "no let's go back to my first plan but make it three bags",
    "Yes, please confirm",
    "Where is my order 77120?",
    "Hi, I'm Priya. My order 88213, placed on 3 March, arrived 40 minutes late and I was told"
    " the delivery fee would be refunded.",
    "Thanks, that's helpful",
]

DbOption = Annotated[
    str | None,
    typer.Option("--db", help="Database URL (default: $FRONTDESK_DB or sqlite:///frontdesk.db)."),
]
ModelOption = Annotated[
    str | None,
    typer.Option("--model", help="Model spec, e.g. offline, anthropic:claude-sonnet-4-5."),
]
AppOption = Annotated[str, typer.Option("--app", help="module:attr naming an Orchestrator.")]


def _turn_table(number: int, text: str, reply: Reply) -> Table:
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    table.add_row("user", escape(text))
    table.add_row("category", reply.category or "-")
    if reply.request is not None:
        table.add_row("request", escape(json.dumps(reply.request.model_dump(mode="json"))))
    elif reply.need_more_info is not None:
        table.add_row("missing", escape(", ".join(reply.need_more_info.missing) or "-"))
    table.add_row("instruction", escape(reply.outcome.instruction) if reply.outcome else "-")
    table.add_row("reply", f"[green]{escape(reply.text)}[/green]")
    usage = ", ".join(
        f"{expert} {u.total_input_tokens}in/{u.output_tokens}out"
        for expert, u in reply.usage.items()
    )
    table.add_row("tokens", usage or "-")
    return table


async def _demo(model: str | None, db: str) -> None:
    orch = load_app(DEFAULT_APP, model=model, db=db)
    conversation = "demo-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]
    console.print(describe_models(model))
    console.print(f"Database: {mask_url(db)}   conversation: {conversation}\n")
    try:
        for number, text in enumerate(DEMO_TURNS, 1):
            reply = await orch.handle(conversation, text, user_id="demo-user")
            console.print(Panel(_turn_table(number, text, reply), title=f"turn {number}"))
    finally:
        await orch.aclose()
    console.print("\nSee it again:")
    for command in ("thread show", "audit show"):
        console.print(f"  frontdesk {command} {conversation} --db {mask_url(db)}", soft_wrap=True)


def demo(model: ModelOption = None, db: DbOption = None) -> None:
    """The potato shop end to end: per turn the category, request, instruction and reply."""
    asyncio.run(_demo(model, db or default_db()))


async def _chat(app: str, model: str | None, db: str, conversation: str) -> None:
    orch = load_app(app, model=model, db=db)
    console.print(describe_models(model))
    console.print(
        f"Database: {mask_url(db)}   conversation: {conversation}   (empty line or Ctrl-D quits)"
    )
    try:
        while True:
            try:
                text = await asyncio.to_thread(console.input, "[bold]you> [/bold]")
            except EOFError:
                break
            if not text.strip():
                break
            try:
                reply = await orch.handle(conversation, text)
            except InvalidUserText as e:
                console.print(f"[red]{escape(str(e))}[/red]")
                continue
            except TurnFailed as e:
                console.print(
                    f"[yellow]{e.safe_reply}[/yellow]  [dim]({e.stage}: {escape(str(e))})[/dim]"
                )
                continue
            detail = reply.category or ""
            if reply.request is not None:
                detail += " " + json.dumps(reply.request.model_dump(mode="json"))
            console.print(f"[dim]{escape(detail)}[/dim]\n[green]bot>[/green] {escape(reply.text)}")
    finally:
        await orch.aclose()


def chat(
    app: AppOption = DEFAULT_APP,
    model: ModelOption = None,
    db: DbOption = None,
    conversation: Annotated[
        str | None, typer.Option("--conversation", help="Carry on this conversation id.")
    ] = None,
) -> None:
    """Talk to any Orchestrator in the terminal."""
    conversation = conversation or "chat-" + uuid.uuid4().hex[:8]
    asyncio.run(_chat(app, model, db or default_db(), conversation))
