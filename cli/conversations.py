"""`frontdesk conversations`: list the conversations of a database (newest first)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from frontdesk.cli._options import DbOption, JsonOption, db_url, id_column, print_table
from frontdesk.errors import UserError
from frontdesk.threads.listing import ConversationRow, count_conversations, list_conversations
from frontdesk.threads.store import ConversationStore


def _since(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as e:
        raise UserError(
            f"--since {value!r}: expected an ISO date or time, e.g. 2026-03-01 or"
            " 2026-03-01T09:30+00:00"
        ) from e
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


async def _rows(
    url: str, *, user: str | None, since: datetime | None, limit: int, profile: str | None
) -> tuple[list[ConversationRow], int]:
    """The rows asked for, and how many conversations the database holds in all."""
    store = await ConversationStore.open(url)
    try:
        rows = await list_conversations(
            store.engine, user=user, since=since, limit=limit, profile=profile
        )
        total = await count_conversations(store.engine) if not rows else len(rows)
        return rows, total
    finally:
        await store.aclose()


def nothing_found(
    user: str | None, since: str | None, total: int, profile: str | None = None
) -> str:
    """What an empty listing says: whether a filter left the database's conversations out."""
    if user is None and since is None and profile is None:
        return "no conversations in this database"
    of = "" if user is None else f" of user {user}"
    of += "" if profile is None else f" of profile {profile}"
    when = "" if since is None else f" active since {since}"
    return f"no conversations{of}{when} ({total} in this database)"


def conversations(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's.")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only those active since (ISO date or time).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    profile: Annotated[
        str | None, typer.Option("--profile", help="Only those answered by this profile.")
    ] = None,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """List conversations, the most recently active first."""
    rows, total = asyncio.run(
        _rows(db_url(db), user=user, since=_since(since), limit=limit, profile=profile)
    )
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in rows], ensure_ascii=False, indent=2))
        return
    if not rows:
        typer.echo(nothing_found(user, since, total, profile))
        return
    table = Table()
    id_column(table, "conversation", [r.conversation_id for r in rows])
    id_column(table, "user", [r.user_id or "-" for r in rows])
    table.add_column("profile")
    table.add_column("last message", no_wrap=True)
    for name in ("messages", "user turns"):
        table.add_column(name, justify="right")
    table.add_column("resolution", no_wrap=True)
    for r in rows:
        table.add_row(
            escape(r.conversation_id),
            escape(r.user_id or "-"),
            escape(r.profile or "-"),
            (r.last_message_at or r.created_at)[:19].replace("T", " "),
            str(r.messages),
            str(r.user_turns),
            r.resolution if r.resolved_by is None else f"{r.resolution} ({r.resolved_by})",
        )
    print_table(table)
