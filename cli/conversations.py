"""`frontdesk conversations`: list the conversations of a database (newest first)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Annotated, Any

import sqlalchemy as sa
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from frontdesk.cli._options import DbOption, JsonOption, db_url
from frontdesk.errors import UserError
from frontdesk.threads.models import Conversation, Message
from frontdesk.threads.store import ConversationStore


@dataclass(frozen=True)
class ConversationRow:
    """One line of the list."""

    conversation_id: str
    user_id: str | None
    created_at: str
    last_message_at: str | None
    messages: int
    user_turns: int
    """User messages on every branch (edits included); compactions are not messages here."""


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


async def list_conversations(
    url: str, *, user: str | None = None, since: datetime | None = None, limit: int = 100
) -> list[ConversationRow]:
    """The newest `limit` conversations, optionally of one user or active since a time."""
    conv = Conversation.__table__  # type: ignore[attr-defined]
    msg = Message.__table__  # type: ignore[attr-defined]
    last = sa.func.max(msg.c.created_at)
    query = (
        sa.select(
            conv.c.id,
            conv.c.user_id,
            conv.c.created_at,
            last.label("last"),
            sa.func.count(msg.c.id).label("messages"),
            sa.func.sum(sa.case((msg.c.role == "user", 1), else_=0)).label("users"),
        )
        .select_from(conv.outerjoin(msg, msg.c.conversation_id == conv.c.id))
        .group_by(conv.c.id, conv.c.user_id, conv.c.created_at)
        .order_by(sa.func.coalesce(last, conv.c.created_at).desc(), conv.c.id)
        .limit(limit)
    )
    if user is not None:
        query = query.where(conv.c.user_id == user)
    if since is not None:
        query = query.having(sa.func.coalesce(last, conv.c.created_at) >= since)
    store = await ConversationStore.open(url)
    try:
        async with store.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
    finally:
        await store.aclose()

    def iso(value: Any) -> str | None:
        return value.isoformat() if isinstance(value, datetime) else value

    return [
        ConversationRow(
            r.id, r.user_id, iso(r.created_at) or "", iso(r.last), r.messages, int(r.users or 0)
        )
        for r in rows
    ]


def conversations(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's.")] = None,
    since: Annotated[
        str | None, typer.Option("--since", help="Only those active since (ISO date or time).")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """List conversations, the most recently active first."""
    rows = asyncio.run(list_conversations(db_url(db), user=user, since=_since(since), limit=limit))
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in rows], ensure_ascii=False, indent=2))
        return
    if not rows:
        typer.echo("no conversations in this database")
        return
    table = Table()
    for name in ("conversation", "user", "last message", "messages", "user turns"):
        table.add_column(name, justify="right" if name in ("messages", "user turns") else "left")
    for r in rows:
        table.add_row(
            escape(r.conversation_id),
            escape(r.user_id or "-"),
            (r.last_message_at or r.created_at)[:19].replace("T", " "),
            str(r.messages),
            str(r.user_turns),
        )
    Console().print(table)
