"""Listing conversations (`frontdesk conversations`): the newest first, with their counts.

The query reads the threads tables, so it lives here; the CLI prints what it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk.threads.models import Conversation, Message


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
    resolution: str = "open"
    """`open`, `resolved`, `assumed_resolved`, `handed_off` or `abandoned` (docs/outcomes.md)."""
    resolved_by: str | None = None
    profile: str | None = None
    """The profile answering it (`None`: from before profiles)."""


async def list_conversations(
    engine: AsyncEngine,
    *,
    user: str | None = None,
    since: datetime | None = None,
    limit: int = 100,
    profile: str | None = None,
) -> list[ConversationRow]:
    """The newest `limit` conversations, optionally of one user, of one profile, or active
    since a time."""
    conv = Conversation.__table__  # type: ignore[attr-defined]
    msg = Message.__table__  # type: ignore[attr-defined]
    last = sa.func.max(msg.c.created_at)
    query = (
        sa.select(
            conv.c.id,
            conv.c.user_id,
            conv.c.created_at,
            conv.c.resolution,
            conv.c.resolved_by,
            conv.c.profile,
            last.label("last"),
            sa.func.count(msg.c.id).label("messages"),
            sa.func.sum(sa.case((msg.c.role == "user", 1), else_=0)).label("users"),
        )
        .select_from(conv.outerjoin(msg, msg.c.conversation_id == conv.c.id))
        .group_by(
            conv.c.id,
            conv.c.user_id,
            conv.c.created_at,
            conv.c.resolution,
            conv.c.resolved_by,
            conv.c.profile,
        )
        .order_by(sa.func.coalesce(last, conv.c.created_at).desc(), conv.c.id)
        .limit(limit)
    )
    if user is not None:
        query = query.where(conv.c.user_id == user)
    if profile is not None:
        query = query.where(conv.c.profile == profile)
    if since is not None:
        query = query.having(sa.func.coalesce(last, conv.c.created_at) >= since)
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()

    def iso(value: Any) -> str | None:
        return value.isoformat() if isinstance(value, datetime) else value

    return [
        ConversationRow(
            r.id,
            r.user_id,
            iso(r.created_at) or "",
            iso(r.last),
            r.messages,
            int(r.users or 0),
            r.resolution,
            r.resolved_by,
            r.profile,
        )
        for r in rows
    ]


async def count_conversations(engine: AsyncEngine) -> int:
    """How many conversations the database holds (to say what a filter left out)."""
    conv = Conversation.__table__  # type: ignore[attr-defined]
    async with engine.connect() as conn:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(conv))).scalar_one())
