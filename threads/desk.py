"""The operator desk's reads: what the live event streams poll, and the turns' outcomes
an operator reads beside the thread.

What the live event streams poll: one cheap read that changes whenever anything a
conversation's stream shows changes (revision `0015_desk` for the claim).

The service's `/events` routes poll the store rather than listen for notifications, so an
event written by one worker reaches a client of any other on either backend (SQLite or
PostgreSQL) with nothing else to run. Each poll is this one indexed statement; only when
its result differs does the stream read the transcript and the hand-offs again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver.tx import run_sync_tx
from frontdesk.threads._outcomes import TurnOutcome
from frontdesk.threads.models import Conversation, HandoffRow, Message, TurnOutcomeRow

_conv = Conversation.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]
_handoff = HandoffRow.__table__  # type: ignore[attr-defined]
_out = TurnOutcomeRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class ChangeMark:
    """A fingerprint of a conversation's stream: equal marks, nothing new to send."""

    exists: bool
    active_leaf_id: str | None
    messages: int
    last_message_at: datetime | None
    handoffs: int
    handoff_changed_at: tuple[datetime | None, ...]
    waiting: bool
    queue_position: int | None
    """1 for the first user waiting for a person, while the hand-off is open and nobody
    has claimed it; `None` otherwise."""


def _mark(conn: Connection, conversation_id: str) -> ChangeMark:
    cid = conversation_id
    messages = sa.select(sa.func.count(), sa.func.max(_msg.c.created_at)).where(
        _msg.c.conversation_id == cid
    )
    count, last_at = conn.execute(messages).one()
    leaf = conn.execute(sa.select(_conv.c.active_leaf_id).where(_conv.c.id == cid)).first()
    rows = conn.execute(
        sa.select(
            _handoff.c.opened_at,
            _handoff.c.claimed_at,
            _handoff.c.closed_at,
            _handoff.c.waiting_since,
            _handoff.c.claimed_by,
        )
        .where(_handoff.c.conversation_id == cid)
        .order_by(_handoff.c.opened_at)
    ).all()
    changed = tuple(t for r in rows for t in (r[0], r[1], r[2]))
    position: int | None = None
    waiting = False
    if rows and rows[-1][2] is None:  # open
        waiting = rows[-1][3] is not None
        if rows[-1][4] is None:
            since = rows[-1][3] or rows[-1][0]
            ahead = conn.execute(
                sa.select(sa.func.count()).where(
                    _handoff.c.closed_at.is_(None),
                    _handoff.c.claimed_by.is_(None),
                    _handoff.c.waiting_since.is_not(None),
                    _handoff.c.waiting_since < since,
                )
            ).scalar_one()
            position = int(ahead) + 1
    return ChangeMark(
        exists=leaf is not None,
        active_leaf_id=None if leaf is None else leaf[0],
        messages=int(count),
        last_message_at=last_at,
        handoffs=len(rows),
        handoff_changed_at=changed,
        waiting=waiting,
        queue_position=position,
    )


async def change_mark(engine: AsyncEngine, conversation_id: str) -> ChangeMark:
    """The conversation's `ChangeMark` now (a read-only transaction)."""
    return await run_sync_tx(engine, lambda conn: _mark(conn, conversation_id), readonly=True)


def _queue_mark(conn: Connection) -> tuple[tuple[str, str | None, datetime | None], ...]:
    rows = conn.execute(
        sa.select(_handoff.c.conversation_id, _handoff.c.claimed_by, _handoff.c.waiting_since)
        .where(_handoff.c.closed_at.is_(None))
        .order_by(_handoff.c.conversation_id)
    ).all()
    return tuple((r[0], r[1], r[2]) for r in rows)


async def queue_mark(engine: AsyncEngine) -> tuple[tuple[str, str | None, datetime | None], ...]:
    """A fingerprint of the open hand-offs (who has each, who waits): equal, no change."""
    return await run_sync_tx(engine, _queue_mark, readonly=True)


def _outcomes(conn: Connection, conversation_id: str) -> list[TurnOutcome]:
    rows = conn.execute(sa.select(_out).where(_out.c.conversation_id == conversation_id)).mappings()
    return [TurnOutcome.from_row(r) for r in rows]


async def turn_outcomes(engine: AsyncEngine, conversation_id: str) -> dict[str, TurnOutcome]:
    """Every stored turn outcome of the conversation (category, request, instruction),
    keyed by the user message it answers: one read, for the console's context pane."""
    found = await run_sync_tx(engine, lambda conn: _outcomes(conn, conversation_id), readonly=True)
    return {o.user_message_id: o for o in found}
