"""Did it help: the SQL of a conversation's resolution and of the customer's ratings.

A conversation's `resolution` (revision 0026) changes inside the writes that cause it: a
handler's `Outcome(resolves=True)` in the turn's last transaction (`ConversationStore.
finish_turn`), a hand-off when it opens and when an operator hands it back
(`threads.handoff`), a customer's rating here. Only the assume sweep is a write of its
own: one UPDATE over the open conversations whose last message is a bot answer older than
`assume_after` (an index on `resolution` keeps it off the resolved ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver.tx import run_sync_tx
from frontdesk.errors import InvalidInput
from frontdesk.threads.models import (
    Conversation,
    FeedbackRow,
    Message,
    TurnOutcomeRow,
    utcnow,
)

__all__ = [
    "RESOLUTIONS",
    "Feedback",
    "Resolution",
    "ResolutionStore",
    "ResolvedBy",
    "resolve",
]

Resolution = Literal["open", "resolved", "assumed_resolved", "handed_off", "abandoned"]
ResolvedBy = Literal["customer", "handler", "operator", "timeout"]
RESOLUTIONS: tuple[Resolution, ...] = (
    "open",
    "resolved",
    "assumed_resolved",
    "handed_off",
    "abandoned",
)

_conv = Conversation.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]
_out = TurnOutcomeRow.__table__  # type: ignore[attr-defined]
_fb = FeedbackRow.__table__  # type: ignore[attr-defined]

POSITIVE = 4
"""A rating from this up (thumbs up is 5) resolves the conversation, by the customer."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Feedback:
    """A customer's rating of one bot answer, as stored."""

    message_id: str
    conversation_id: str
    user_id: str | None
    rating: int
    comment: str | None
    created_at: datetime
    resolved: bool = False
    """This rating resolved the conversation (by the customer)."""


def resolve(
    conn: Connection,
    conversation_id: str,
    resolution: Resolution,
    by: ResolvedBy | None,
    *,
    unless: tuple[Resolution, ...] = (),
) -> bool:
    """Set the conversation's resolution (inside the caller's transaction); unchanged when
    it is one of `unless`. Returns whether it changed."""
    stmt = sa.update(_conv).where(_conv.c.id == conversation_id)
    stmt = stmt.where(_conv.c.resolution.not_in([resolution, *unless]))
    done = resolution not in ("open", "handed_off")
    values = {
        "resolution": resolution,
        "resolved_at": utcnow() if done else None,
        "resolved_by": by if done else None,
    }
    return bool(conn.execute(stmt.values(**values)).rowcount)


def _leaf_is_old_answer(cutoff: Any) -> sa.ColumnElement[bool]:
    """The conversation's active leaf is an assistant message written before `cutoff`."""
    leaf = _msg.alias("leaf")
    return sa.exists().where(
        leaf.c.id == _conv.c.active_leaf_id,
        leaf.c.role == "assistant",
        leaf.c.kind != "handoff",
        leaf.c.created_at <= cutoff,
    )


def _left_mid_request() -> sa.ColumnElement[bool]:
    """The last answer asked for more (the request was in progress) or was a failed turn's
    safe reply: the customer left before it was done."""
    leaf = _msg.alias("left")
    asked = sa.exists().where(
        leaf.c.id == _conv.c.active_leaf_id,
        _out.c.user_message_id == leaf.c.parent_id,
        sa.func.coalesce(sa.cast(_out.c.need_more_info, sa.Text), "null") != "null",
    )
    failed = sa.exists().where(leaf.c.id == _conv.c.active_leaf_id, leaf.c.kind == "failed")
    return sa.or_(asked, failed)


def assume_due(conn: Connection, cutoff: datetime) -> list[tuple[str, str, str | None]]:
    """Every open conversation whose last bot answer is older than `cutoff` becomes
    `assumed_resolved`, or `abandoned` when it was left mid-request; one UPDATE. Returns
    (id, resolution, user_id) of each."""
    bound = sa.bindparam("cutoff", cutoff, type_=Conversation.__table__.c.created_at.type)  # type: ignore[attr-defined]
    stmt = (
        sa.update(_conv)
        .where(_conv.c.resolution == "open", _leaf_is_old_answer(bound))
        .values(
            resolution=sa.case(
                (_left_mid_request(), "abandoned"), else_=sa.literal("assumed_resolved")
            ),
            resolved_at=utcnow(),
            resolved_by="timeout",
        )
        .returning(_conv.c.id, _conv.c.resolution, _conv.c.user_id)
    )
    return [(r[0], r[1], r[2]) for r in conn.execute(stmt)]


def _upsert_feedback(dialect: str) -> Any:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(_fb)
    return stmt.on_conflict_do_update(
        index_elements=[_fb.c.message_id],
        set_={
            "rating": stmt.excluded.rating,
            "comment": stmt.excluded.comment,
            "created_at": stmt.excluded.created_at,
            "user_id": stmt.excluded.user_id,
        },
    )


def rate(conn: Connection, feedback: Feedback) -> bool:
    """Store (or replace) the rating; a positive one resolves the conversation by the
    customer unless it is resolved already. Returns whether it resolved it."""
    conn.execute(
        _upsert_feedback(conn.dialect.name),
        {
            "message_id": feedback.message_id,
            "conversation_id": feedback.conversation_id,
            "user_id": feedback.user_id,
            "rating": feedback.rating,
            "comment": feedback.comment,
            "created_at": feedback.created_at,
        },
    )
    if feedback.rating < POSITIVE:
        return False
    return resolve(conn, feedback.conversation_id, "resolved", "customer")


class ResolutionStore:
    """The writes of resolution and feedback that are not part of a turn."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def assume(self, cutoff: datetime) -> list[tuple[str, str, str | None]]:
        """`assume_due` in its own transaction."""
        return await run_sync_tx(self.engine, lambda conn: assume_due(conn, cutoff))

    async def rate(
        self,
        message_id: str,
        conversation_id: str,
        user_id: str | None,
        rating: int,
        comment: str | None,
        also: Any = None,
    ) -> Feedback:
        """Store a rating of a bot answer of `conversation_id` (checked by the caller),
        running `also(conn, feedback)` last in the transaction (its audit event).

        Raises:
            InvalidInput: the rating is not 1-5, or the comment is not storable text.
        """
        if isinstance(rating, bool) or not isinstance(rating, int) or not 1 <= rating <= 5:
            raise InvalidInput(f"rating must be a whole number from 1 to 5, got {rating!r}")
        if comment is not None and (not isinstance(comment, str) or "\x00" in comment):
            raise InvalidInput("comment must be text without NUL characters")
        if comment is not None and len(comment) > 4000:
            raise InvalidInput(f"comment is {len(comment)} characters; at most 4000")

        def work(conn: Connection) -> Feedback:
            fb = Feedback(
                message_id=message_id,
                conversation_id=conversation_id,
                user_id=user_id,
                rating=rating,
                comment=comment or None,
                created_at=utcnow(),
            )
            resolved = rate(conn, fb)
            fb = Feedback(**{**_fields(fb), "resolved": resolved})
            if also is not None:
                also(conn, fb)
            return fb

        return await run_sync_tx(self.engine, work)

    async def counts(self) -> dict[str, int]:
        """Conversations by resolution, every state present (0 for none)."""

        def work(conn: Connection) -> dict[str, int]:
            stmt = sa.select(_conv.c.resolution, sa.func.count()).group_by(_conv.c.resolution)
            found = {str(r[0]): int(r[1]) for r in conn.execute(stmt)}
            return {name: found.get(name, 0) for name in RESOLUTIONS} | found

        return await run_sync_tx(self.engine, work, readonly=True)

    async def of_conversation(self, conversation_id: str) -> list[Feedback]:
        """The ratings given in a conversation."""

        def work(conn: Connection) -> list[Feedback]:
            rows = conn.execute(
                sa.select(_fb).where(_fb.c.conversation_id == conversation_id)
            ).mappings()
            return [Feedback(**dict(r)) for r in rows]

        return await run_sync_tx(self.engine, work, readonly=True)


def _fields(fb: Feedback) -> dict[str, Any]:
    return {name: getattr(fb, name) for name in Feedback.__slots__}
