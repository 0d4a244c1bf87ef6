"""Answered turns per conversation, from the conversation store, for `audit verify`.

The audit package cannot read the store (it does not import `threads`),
so `audit verify` counts the assistant messages here and passes the counts in:
a log emptied wholesale (TRUNCATE, a dropped table) still chains, but no longer audits
the turns the store shows as answered.
"""

from __future__ import annotations

from sqlalchemy import Connection, func, inspect, select
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col

from frontdesk.threads.models import Message


def _count(conn: Connection) -> dict[str, int] | None:
    if not inspect(conn).has_table(str(Message.__tablename__)):
        return None
    conversation = col(Message.conversation_id)
    query = (
        select(conversation, func.count())
        .where(col(Message.role) == "assistant")
        .group_by(conversation)
    )
    return {cid: int(n) for cid, n in conn.execute(query)}


async def answered_turns(engine: AsyncEngine) -> dict[str, int] | None:
    """Assistant messages per conversation; `None` when the database holds no store."""
    async with engine.connect() as conn:
        return await conn.run_sync(_count)
