"""The SQL of kept ruled values and of scrubbing a user message (revision `0027_ruled_values`).

A turn whose request has ruled fields (`Redact(...)`) keeps, per user, a keyed digest of
each value and what it is shown as (`frontdesk.ruled`), never the value; with
`scrub_secrets` it also rewrites its stored user message with the values replaced. Both
ride the turn's own transactions (`save_outcome`, `finish_turn`): a turn without ruled
fields writes nothing here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk.db import run_read
from frontdesk.ruled import RuledValue
from frontdesk.threads.models import Conversation, Message, UTCDateTime, utcnow

__all__ = [
    "Scrub",
    "erase_ruled_values",
    "read_for_conversation",
    "read_for_message",
    "read_for_user",
    "ruled_values_of",
    "scrub",
    "table",
]

table = sa.Table(
    "ruled_value",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user_id", sa.String(255), nullable=False),
    sa.Column("conversation_id", sa.String(255), nullable=False),
    sa.Column("message_id", sa.String(64), nullable=False),
    sa.Column("field", sa.Text, nullable=False),
    sa.Column("rule", sa.String(16), nullable=False),
    sa.Column("shown", sa.Text, nullable=False),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("length", sa.Integer, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)
_conv = Conversation.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True, slots=True)
class Scrub:
    """What a turn with ruled values writes in its transaction: its kept values, and (with
    `scrub_secrets`) its user message's new text."""

    message_id: str
    rows: Sequence[RuledValue]
    content: str | None = None
    """The user message with its values replaced; `None` leaves the message as it is."""
    token_count: int = 0


def scrub(conn: Connection, work: Scrub) -> None:
    """Keep `work.rows` (once per message and digest) and rewrite the user message."""
    if work.rows:
        values = [
            {
                "user_id": r.user,
                "conversation_id": r.conversation_id,
                "message_id": r.message_id,
                "field": r.field,
                "rule": r.rule,
                "shown": r.shown,
                "digest": r.digest,
                "length": r.length,
                "created_at": utcnow(),
            }
            for r in work.rows
        ]
        insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
        stmt = insert(table).on_conflict_do_nothing(index_elements=["message_id", "digest"])
        conn.execute(stmt, values)
    if work.content is not None:
        conn.execute(
            _msg.update()
            .where(_msg.c.id == work.message_id, _msg.c.role == "user")
            .values(content=work.content, token_count=work.token_count)
        )


def _rows(conn: Connection, where: sa.ColumnElement[bool]) -> list[RuledValue]:
    result = conn.execute(sa.select(table).where(where).order_by(table.c.id))
    return [
        RuledValue(
            user=row.user_id,
            conversation_id=row.conversation_id,
            message_id=row.message_id,
            field=row.field,
            rule=row.rule,
            shown=row.shown,
            digest=row.digest,
            length=row.length,
        )
        for row in result
    ]


def read_for_user(conn: Connection, user: str) -> list[RuledValue]:
    """Every value kept for `user` (a user id, or `conversation:<id>`)."""
    return _rows(conn, table.c.user_id == user)


def read_for_message(conn: Connection, message_id: str) -> list[RuledValue]:
    """The values kept from one user message."""
    return _rows(conn, table.c.message_id == message_id)


def read_for_conversation(conn: Connection, conversation_id: str) -> list[RuledValue]:
    """The values kept for a conversation's owner (every conversation of theirs), or for
    the conversation itself when it has no owner."""
    owner = sa.select(_conv.c.user_id).where(_conv.c.id == conversation_id).scalar_subquery()
    return _rows(
        conn,
        sa.or_(
            table.c.user_id == owner,
            table.c.user_id == f"conversation:{conversation_id}",
        ),
    )


async def ruled_values_of(
    engine: AsyncEngine,
    *,
    user: str | None = None,
    conversation_id: str | None = None,
    message_id: str | None = None,
) -> list[RuledValue]:
    """The kept values of `user`, of `conversation_id`'s owner (`read_for_conversation`), or
    of one user message."""
    if message_id is not None:
        return await run_read(engine, lambda conn: read_for_message(conn, message_id))
    if user is not None:
        return await run_read(engine, lambda conn: read_for_user(conn, user))
    assert conversation_id is not None, "name a user or a conversation"
    return await run_read(engine, lambda conn: read_for_conversation(conn, conversation_id))


def erase_ruled_values(conn: Connection, ids: Sequence[str], user_id: str) -> int:
    """Erasure: delete the values kept for `user_id` and for its conversations `ids`."""
    owners = [user_id, *(f"conversation:{c}" for c in ids)]
    deleted = conn.execute(
        table.delete().where(sa.or_(table.c.user_id.in_(owners), table.c.conversation_id.in_(ids)))
    )
    return int(deleted.rowcount or 0)
