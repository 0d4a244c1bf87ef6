"""The SQL of spend limits: the usage stored turns recorded, per user or conversation.

Every turn's outcome keeps the usage and models of the experts that answered it
(`turn_outcome.usage`, `.models`); a spend limit adds them up over its window, read from
the database so that every process and worker counts the same spend (revision
`0025_confirmation` indexes the outcomes by conversation and time for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from frontdesk.threads.models import Conversation, TurnOutcomeRow

_conv = Conversation.__table__  # type: ignore[attr-defined]
_out = TurnOutcomeRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True, slots=True)
class Spent:
    """One stored turn's usage: when, and per expert its tokens and model."""

    at: datetime
    usage: dict[str, dict[str, int]]
    models: dict[str, str]


def spent_since(
    conn: Connection, *, since: datetime, user_id: str | None, conversation_id: str | None
) -> list[Spent]:
    """The usage of the turns stored since `since`, of every conversation of `user_id`
    (when given) or of `conversation_id`, oldest first."""
    columns = (_out.c.created_at, _out.c.usage, _out.c.models)
    stmt: Any
    if user_id is not None:
        stmt = (
            sa.select(*columns)
            .select_from(_out.join(_conv, _conv.c.id == _out.c.conversation_id))
            .where(_conv.c.user_id == user_id, _out.c.created_at >= since)
        )
    else:
        stmt = sa.select(*columns).where(
            _out.c.conversation_id == conversation_id, _out.c.created_at >= since
        )
    rows = conn.execute(stmt.order_by(_out.c.created_at)).mappings()
    return [
        Spent(at=row["created_at"], usage=row["usage"] or {}, models=row["models"] or {})
        for row in rows
    ]
