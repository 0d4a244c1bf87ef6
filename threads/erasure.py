"""Erasure and retention steps on the conversation database's tables.

Each function runs in its caller's write transaction (a sync `Connection`) and is
idempotent: what carries the erased marker already is not changed or counted again, so a
re-run after a crash finishes the work and reports 0s. The order of the steps, and the
audit side, are the orchestrator's (`orchestrator/erasure.py`).

`erasure_request` (revision `0019_jobs_more`) records each request, with its job in the
same transaction (`record_request`), so the job runner finishes an erasure whose process
died; `finish_request` empties its user id and keeps the counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection

from frontdesk.threads.handler_state import (
    ERASED_MARKER,
    delete_user_state,
    erase_conversation_state,
)
from frontdesk.threads.memory import delete_user_memories
from frontdesk.threads.models import (
    Conversation,
    FeedbackRow,
    HandoffRow,
    Message,
    TurnOutcomeRow,
    UTCDateTime,
    utcnow,
)
from frontdesk.threads.summaries import Summary

__all__ = [
    "ERASED",
    "ErasureRequest",
    "age_out",
    "conversation_ids",
    "disown_conversations",
    "erase_handler_state",
    "erase_feedback",
    "erase_handoffs",
    "erase_memories",
    "erase_messages",
    "erase_outcomes",
    "erase_summaries",
    "finish_request",
    "read_request",
    "record_request",
]

_conv = Conversation.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]
_outcome = TurnOutcomeRow.__table__  # type: ignore[attr-defined]
_handoff = HandoffRow.__table__  # type: ignore[attr-defined]
_summary = Summary.__table__  # type: ignore[attr-defined]
_feedback = FeedbackRow.__table__  # type: ignore[attr-defined]

_requests = sa.Table(
    "erasure_request",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user_id", sa.Text),
    sa.Column("requested_by", sa.Text),
    sa.Column("requested_at", UTCDateTime, nullable=False),
    sa.Column("done_at", UTCDateTime),
    sa.Column("counts", sa.JSON),
)

ERASED = ERASED_MARKER
"""What erased text becomes (the audit log's shredded payloads read the same)."""

_OUTCOME_ERASED: dict[str, Any] = {
    "request": None,
    "need_more_info": None,
    "instruction": ERASED,
    "data": {"erased": ERASED},
    "confirmation": None,  # A pending request holds the customer's fields too.
    "reply": None,
    "flow": None,  # A request in progress holds the customer's fields too.
}


def _rows(result: Any) -> int:
    return int(result.rowcount or 0)


def conversation_ids(conn: Connection, owners: Sequence[str]) -> list[str]:
    """The ids of every conversation any of `owners` has (a user id, its erased digest)."""
    query = sa.select(_conv.c.id).where(_conv.c.user_id.in_(owners)).order_by(_conv.c.id)
    return list(conn.execute(query).scalars())


def erase_messages(conn: Connection, ids: Sequence[str], _user_id: str) -> int:
    """The conversations' messages keep their place in the tree; their text is erased."""
    where = sa.and_(_msg.c.conversation_id.in_(ids), _msg.c.content != ERASED)
    return _rows(conn.execute(sa.update(_msg).where(where).values(content=ERASED)))


def erase_summaries(conn: Connection, ids: Sequence[str], _user_id: str) -> int:
    """A summary retells the messages, so its text goes with theirs."""
    where = sa.and_(_summary.c.conversation_id.in_(ids), _summary.c.content != ERASED)
    return _rows(conn.execute(sa.update(_summary).where(where).values(content=ERASED)))


def erase_outcomes(conn: Connection, ids: Sequence[str], _user_id: str) -> int:
    """Stored turn outcomes hold the extracted request and the handler's data."""
    where = sa.and_(_outcome.c.conversation_id.in_(ids), _outcome.c.instruction != ERASED)
    return _rows(conn.execute(sa.update(_outcome).where(where).values(**_OUTCOME_ERASED)))


def erase_memories(conn: Connection, _ids: Sequence[str], user_id: str) -> int:
    """Every fact about the user, superseded ones too (their text leaves the index)."""
    return len(delete_user_memories(conn, user_id)[1])


def erase_handler_state(conn: Connection, ids: Sequence[str], user_id: str) -> int:
    """The user's own scope is deleted; their conversations' scope keeps its keys (an
    idempotency record still stops a repeat) with the erased marker as every value."""
    return delete_user_state(conn, user_id) + erase_conversation_state(conn, ids)


def erase_handoffs(conn: Connection, ids: Sequence[str], _user_id: str) -> int:
    """A hand-off's reason is the triage's or an operator's words about the user."""
    where = sa.and_(_handoff.c.conversation_id.in_(ids), _handoff.c.reason != ERASED)
    return _rows(conn.execute(sa.update(_handoff).where(where).values(reason=ERASED)))


def erase_feedback(conn: Connection, ids: Sequence[str], _user_id: str) -> int:
    """A rating's comment is the customer's own words; the rating (a number) stays for
    the reports, no longer tied to the user's id."""
    where = sa.and_(
        _feedback.c.conversation_id.in_(ids),
        sa.or_(_feedback.c.comment.is_(None), _feedback.c.comment != ERASED),
    )
    has_comment = sa.and_(where, _feedback.c.comment.is_not(None))
    erased = _rows(conn.execute(sa.update(_feedback).where(has_comment).values(comment=ERASED)))
    conn.execute(
        sa.update(_feedback).where(_feedback.c.conversation_id.in_(ids)).values(user_id=None)
    )
    return erased


def disown_conversations(
    conn: Connection, user_id: str, owner: str, *, also: Sequence[str] = ()
) -> int:
    """The user's conversations now belong to `owner` (a digest), their metadata emptied.
    Taken last, so a re-run after a crash still finds the conversations by the user id.
    Conversations owned by any of `also` (an older form of the erased owner) get `owner` too."""
    owners = [user_id, *(o for o in also if o != owner)]
    query = sa.update(_conv).where(_conv.c.user_id.in_(owners))
    return _rows(conn.execute(query.values(user_id=owner, metadata={})))


def age_out(conn: Connection, cutoff: datetime, *, dry_run: bool = False) -> dict[str, int]:
    """Retention: the erased marker on every message, summary and outcome created before
    `cutoff`; with `dry_run`, only how many would get it. Counts by kind."""
    out: dict[str, int] = {}
    for name, table, column in (("messages", _msg, "content"), ("summaries", _summary, "content")):
        where = sa.and_(table.c.created_at < cutoff, table.c[column] != ERASED)
        if dry_run:
            out[name] = int(conn.execute(sa.select(sa.func.count()).where(where)).scalar_one())
        else:
            out[name] = _rows(conn.execute(sa.update(table).where(where).values({column: ERASED})))
    where = sa.and_(
        _feedback.c.created_at < cutoff,
        _feedback.c.comment.is_not(None),
        _feedback.c.comment != ERASED,
    )
    if dry_run:
        out["feedback"] = int(conn.execute(sa.select(sa.func.count()).where(where)).scalar_one())
    else:
        out["feedback"] = _rows(
            conn.execute(sa.update(_feedback).where(where).values(comment=ERASED))
        )
    where = sa.and_(_outcome.c.created_at < cutoff, _outcome.c.instruction != ERASED)
    if dry_run:
        out["outcomes"] = int(conn.execute(sa.select(sa.func.count()).where(where)).scalar_one())
    else:
        out["outcomes"] = _rows(
            conn.execute(sa.update(_outcome).where(where).values(**_OUTCOME_ERASED))
        )
    return out


@dataclass(frozen=True, kw_only=True)
class ErasureRequest:
    """A recorded request to erase a user (`user_id` is `None` once it is done)."""

    id: int
    user_id: str | None
    requested_by: str | None
    done: bool
    counts: dict[str, int]


def record_request(conn: Connection, user_id: str, requested_by: str | None) -> int:
    """Record a request to erase `user_id` (in the transaction that records its job)."""
    stmt = sa.insert(_requests).values(
        user_id=user_id, requested_by=requested_by, requested_at=utcnow()
    )
    return int(conn.execute(stmt.returning(_requests.c.id)).scalar_one())


def read_request(conn: Connection, request_id: int) -> ErasureRequest | None:
    """The request `request_id`, if it exists."""
    row = conn.execute(sa.select(_requests).where(_requests.c.id == request_id)).mappings().first()
    if row is None:
        return None
    return ErasureRequest(
        id=int(row["id"]),
        user_id=row["user_id"],
        requested_by=row["requested_by"],
        done=row["done_at"] is not None,
        counts=dict(row["counts"] or {}),
    )


def finish_request(conn: Connection, request_id: int, counts: dict[str, int]) -> bool:
    """Mark the request done with its counts, its user id emptied (nothing of the user is
    left in it); `False` when it was done already (another runner finished it)."""
    stmt = (
        sa.update(_requests)
        .where(_requests.c.id == request_id, _requests.c.done_at.is_(None))
        .values(user_id=None, done_at=utcnow(), counts=counts)
    )
    return bool(conn.execute(stmt).rowcount)
