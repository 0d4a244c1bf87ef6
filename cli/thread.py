"""`frontdesk thread ...`: look at a conversation's transcript (a tree of messages)."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from datetime import datetime
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from frontdesk.cli._options import (
    DbOption,
    JsonOption,
    app_option,
    db_url,
    existing_db,
    model_option,
)
from frontdesk.devkit.app import DEFAULT_APP, load_app
from frontdesk.errors import UserError
from frontdesk.threads.builder import build_thread
from frontdesk.threads.handoff import HandoffRecord
from frontdesk.threads.store import ConversationStore, MessageRecord

app = typer.Typer(help="thread commands", no_args_is_help=True)

PREVIEW = 70
"""Characters of each message shown."""


def render_tree(
    conversation_id: str,
    messages: list[MessageRecord],
    active_path: list[MessageRecord],
    *,
    all_branches: bool,
    summarised: frozenset[str] = frozenset(),
    handoffs: list[HandoffRecord] | None = None,
) -> Tree:
    """The transcript as a rich Tree; the active path is marked `●`, other branches `○`.

    A run of messages without alternatives stays at one level; only a branch point (an
    edit or a regeneration) nests, one child per alternative. Hand-offs (opened, handed
    back) show after the active-path message that was the newest when they happened.
    """
    after = _handoff_lines(active_path, handoffs or [])
    active = {m.id for m in active_path}
    leaf = active_path[-1].id if active_path else None
    children: dict[str | None, list[MessageRecord]] = defaultdict(list)
    for message in messages:
        children[message.parent_id].append(message)
    title = f"conversation [bold]{escape(conversation_id)}[/bold] ({len(messages)} messages"
    tree = Tree(title + f", {sum(1 for m in messages if m.id not in children)} branches)")

    def shown(kids: list[MessageRecord]) -> list[MessageRecord]:
        return kids if all_branches else [k for k in kids if k.id in active]

    def label(message: MessageRecord, siblings: list[MessageRecord]) -> str:
        text = " ".join(message.content.split())
        text = text if len(text) <= PREVIEW else text[: PREVIEW - 1] + "…"
        mark = "●" if message.id in active else "○"
        style = "bold" if message.id in active else "dim"
        extra = ""
        if len(siblings) > 1 and not all_branches:
            extra = f" [dim](version {siblings.index(message) + 1} of {len(siblings)})[/dim]"
        if message.id == leaf:
            extra += " [green]← active leaf[/green]"
        if message.id in summarised:
            extra += " [magenta]≡ summarised[/magenta]"
        if message.failed:
            extra += " [red]✗ failed turn (safe reply shown)[/red]"
        if message.kind == "handoff":
            extra += " [yellow]⏸ kept for a person (waiting message shown)[/yellow]"
        who = message.role if message.operator_id is None else message.author
        return (
            f"[{style}]{mark} {who:<9} {escape(text)}[/{style}]"
            f" [dim]…{message.id[-8:]}[/dim]{extra}"
        )

    def add_run(node: Tree, message: MessageRecord, siblings: list[MessageRecord]) -> None:
        while True:
            current = node.add(label(message, siblings))
            for line in after.get(message.id, []):
                node.add(line)
            kids = children.get(message.id, [])
            visible = shown(kids)
            if len(visible) == 1:
                message, siblings = visible[0], kids
                continue
            for number, kid in enumerate(visible, 1):
                mark = "●" if kid.id in active else "○"
                branch = current.add(f"[dim]{mark} branch {number} of {len(kids)}[/dim]")
                add_run(branch, kid, kids)
            return

    roots = children.get(None, [])
    for root in shown(roots):
        add_run(tree, root, roots)
    return tree


def _handoff_lines(
    path: list[MessageRecord], handoffs: list[HandoffRecord]
) -> dict[str, list[str]]:
    """Hand-off events as tree lines, keyed by the active-path message they follow (the
    newest one created before them)."""
    events: list[tuple[datetime, str]] = []
    for h in handoffs:
        events.append(
            (h.opened_at, f"[magenta]⇢ handed off to a person: {escape(h.reason)}[/magenta]")
        )
        if h.closed_at is not None:
            by = "timed out" if h.closed_by == "timeout" else "handed back"
            events.append((h.closed_at, f"[magenta]⇠ {by} to the bot[/magenta]"))
    lines: dict[str, list[str]] = defaultdict(list)
    for when, line in events:
        before = [m for m in path if m.created_at <= when]
        if before:
            lines[before[-1].id].append(line)
    return lines


async def _show(
    url: str, conversation_id: str, all_branches: bool, as_json: bool = False
) -> Tree | dict[str, Any] | None:
    store = await ConversationStore.open(url)
    try:
        messages = await store.messages(conversation_id)
        if not messages:
            return None
        leaf = await store.active_leaf(conversation_id)
        path = await store.path(leaf.id) if leaf else []
        replaced = (await build_thread(store, leaf.id)).replaced if leaf else 0
        handoffs = await store.handoffs.history(conversation_id)
    finally:
        await store.aclose()
    # What the experts no longer see verbatim: the path prefix the newest summary covers.
    summarised = frozenset(m.id for m in path[:replaced])
    if as_json:
        on_path = {m.id for m in path}
        shown = messages if all_branches else path
        return {
            "conversation_id": conversation_id,
            "active_leaf_id": leaf.id if leaf else None,
            "messages": [
                {
                    "id": m.id,
                    "parent_id": m.parent_id,
                    "role": m.role,
                    "author": m.author,
                    "kind": m.kind,
                    "content": m.content,
                    "created_at": m.created_at.isoformat(),
                    "client_message_id": m.client_message_id,
                    "on_active_path": m.id in on_path,
                    "summarised": m.id in summarised,
                }
                for m in shown
            ],
            "handoffs": [
                {
                    "id": h.id,
                    "reason": h.reason,
                    "opened_at": h.opened_at.isoformat(),
                    "closed_at": h.closed_at.isoformat() if h.closed_at else None,
                    "closed_by": h.closed_by,
                    "operator_id": h.operator_id,
                }
                for h in handoffs
            ],
        }
    return render_tree(
        conversation_id,
        messages,
        path,
        all_branches=all_branches,
        summarised=summarised,
        handoffs=handoffs,
    )


@app.command("show")
def show(
    conversation: Annotated[str, typer.Argument(help="The conversation id.")],
    all_branches: Annotated[
        bool, typer.Option("--all-branches", help="Show every branch, not only the active one.")
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show a conversation's messages as a tree, the active path marked."""
    console = Console()
    tree = asyncio.run(_show(existing_db(db), conversation, all_branches, as_json))
    if tree is None:
        raise UserError(
            f"no conversation {conversation!r} in this database"
            " (`frontdesk conversations` lists them)"
        )
    if isinstance(tree, dict):
        typer.echo(json.dumps(tree, ensure_ascii=False, indent=2))
        return
    console.print(tree)


AppOption = Annotated[str, app_option("module:attr naming an Orchestrator (its summariser model).")]
ModelOption = Annotated[str | None, model_option("Model spec for the summariser, e.g. offline.")]


async def _compact(app_spec: str, model: str | None, url: str, conversation_id: str) -> int:
    """Force a compaction of the active path; returns the exit code."""
    console = Console()
    orch = load_app(app_spec, model=model, db=url)
    try:
        await orch.open()
        leaf = await orch.store.active_leaf(conversation_id)
        if leaf is None:
            raise UserError(
                f"no conversation {conversation_id!r} in this database"
                " (`frontdesk conversations` lists them)"
            )
        result = await orch.compaction.compact(conversation_id, leaf.id, force=True)
    finally:
        await orch.aclose()
    if result.status == "compacted" and result.summary is not None:
        console.print(
            f"compacted: {result.evicted} messages summarised into summary"
            f" …{result.summary.id[-8:]} ({result.summary.token_count} tokens)"
        )
        return 0
    if result.status == "not_needed":
        console.print("nothing to compact: the path holds only the exchanges always kept")
        return 0
    if result.status == "busy":
        console.print("another process is compacting this conversation; try again shortly")
        return 3
    console.print(f"[red]compaction failed, thread unchanged:[/red] {escape(result.error or '')}")
    return 1


@app.command("compact")
def compact(
    conversation: Annotated[str, typer.Argument(help="The conversation id.")],
    db: DbOption = None,
    app_spec: AppOption = DEFAULT_APP,
    model: ModelOption = None,
) -> None:
    """Summarise the active path's older exchanges now (the transcript keeps them all)."""
    code = asyncio.run(_compact(app_spec, model, db_url(db), conversation))
    if code:
        raise typer.Exit(code)
