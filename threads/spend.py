"""The SQL of spend limits: the usage stored turns recorded, per user or conversation.

Every turn's outcome keeps the usage and models of the experts that answered it
(`turn_outcome.usage`, `.models`); the background calls a turn leads to (the summariser
compacting its thread, the memory expert learning from its message) keep theirs in
`model_spend` (revision `0033_model_spend`). A spend limit adds both up over its window,
read from the database so that every process and worker counts the same spend (revision
`0025_confirmation` indexes the outcomes by conversation and time for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from frontdesk.threads.models import Conversation, TurnOutcomeRow, UTCDateTime, utcnow

_conv = Conversation.__table__  # type: ignore[attr-defined]
_out = TurnOutcomeRow.__table__  # type: ignore[attr-defined]

table = sa.Table(
    "model_spend",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("conversation_id", sa.String(255), nullable=False),
    sa.Column("expert", sa.String(32), nullable=False),
    sa.Column("usage", sa.JSON, nullable=False),
    sa.Column("models", sa.JSON, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)
"""One background expert call's usage (`usage`: per expert, as a turn outcome keeps it)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Spent:
    """One stored turn's usage: when, and per expert its tokens and model."""

    at: datetime
    usage: dict[str, dict[str, int]]
    models: dict[str, str]


def record_spend(
    conn: Connection,
    *,
    conversation_id: str,
    expert: str,
    usage: dict[str, dict[str, int]],
    models: dict[str, str],
) -> None:
    """Keep one background call's usage (the summariser's, the memory expert's)."""
    conn.execute(
        table.insert().values(
            conversation_id=conversation_id,
            expert=expert,
            usage=usage,
            models=models,
            created_at=utcnow(),
        )
    )


def _selected(
    t: sa.Table, since: datetime, user_id: str | None, conversation_id: str | None
) -> Any:
    columns = (t.c.created_at, t.c.usage, t.c.models)
    if user_id is not None:
        return (
            sa.select(*columns)
            .select_from(t.join(_conv, _conv.c.id == t.c.conversation_id))
            .where(_conv.c.user_id == user_id, t.c.created_at >= since)
        )
    return sa.select(*columns).where(
        t.c.conversation_id == conversation_id, t.c.created_at >= since
    )


def spent_since(
    conn: Connection, *, since: datetime, user_id: str | None, conversation_id: str | None
) -> list[Spent]:
    """The usage of the turns stored since `since`, and of the background calls kept since
    (`model_spend`), of every conversation of `user_id` (when given) or of
    `conversation_id`, oldest first."""
    both = sa.union_all(
        _selected(_out, since, user_id, conversation_id),
        _selected(table, since, user_id, conversation_id),
    ).subquery()
    stmt = sa.select(both).order_by(both.c.created_at)
    rows = conn.execute(stmt).mappings()
    return [
        Spent(at=row["created_at"], usage=row["usage"] or {}, models=row["models"] or {})
        for row in rows
    ]
