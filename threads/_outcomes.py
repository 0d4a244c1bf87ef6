"""The SQL of stored turn outcomes and failed-turn markers (revision `0005_turn_outcomes`).

A turn's outcome (category, request, the handler's instruction and data) is written before
the response expert is called, so a retry of the turn reuses it instead of running the
handler again. A turn that fails after its question was stored leaves its safe reply under
the question as an assistant message of kind `failed`; the retry that finishes the turn
supersedes it (see `write_reply`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite

from frontdesk._driver import Statement
from frontdesk.errors import SAFE_REPLY
from frontdesk.threads import _writes, handoff
from frontdesk.threads._lease import FENCE_CTE
from frontdesk.threads._records import MessageRecord
from frontdesk.threads.handoff import Opened
from frontdesk.threads.models import Conversation, Message, TurnOutcomeRow, utcnow

_conv = Conversation.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]
_out = TurnOutcomeRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnOutcome:
    """What a turn decided, as JSON values (the orchestrator parses them back)."""

    user_message_id: str
    conversation_id: str
    category: str
    request: Any = None
    """The extracted request as JSON, or `None`."""
    need_more_info: Any = None
    """What the request expert found missing, as JSON, or `None`."""
    instruction: str
    data: dict[str, Any] = field(default_factory=dict)
    handler_ran: bool = False
    """Whether a category handler (the developer's code) produced this outcome."""
    reply: str | None = None
    """`Outcome.reply`: the approved words, sent verbatim (again on a retry)."""
    handoff: str | None = None
    """Why a person takes over: storing the outcome opens the hand-off (one transaction)."""
    handler_failed: bool = False
    """The handler raised; this is the library's own outcome in its place."""
    usage: dict[str, dict[str, int]] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    sources: list[dict[str, Any]] = field(default_factory=list)
    """The passages the reply was given (id, source, title, text, version, sha256, score)."""
    resolves: bool = False
    """The handler said its effect completes what the customer came for (revision 0026)."""
    confirmation: dict[str, Any] | None = None
    """A `confirm` category's pending request (the turn that asks) or the answer to it
    (`orchestrator/confirmation.py` reads and writes it); `None` for any other turn."""
    flow: dict[str, Any] | None = None
    """The turn's place in the conversation (revision 0028): the request in progress it
    leaves, its categories, language, clarification or cancellation
    (`orchestrator/pending.py`); `None` for a turn with nothing to carry."""

    @classmethod
    def from_row(cls, row: Any) -> TurnOutcome:
        """Build a record from a `turn_outcome` row mapping."""
        return cls(
            user_message_id=row["user_message_id"],
            conversation_id=row["conversation_id"],
            category=row["category"],
            request=row["request"],
            need_more_info=row["need_more_info"],
            instruction=row["instruction"],
            data=row["data"] or {},
            handler_ran=bool(row["handler_ran"]),
            handoff=row["handoff"],
            handler_failed=bool(row["handler_failed"]),
            usage=row["usage"] or {},
            models=row["models"] or {},
            sources=row.get("sources") or [],
            resolves=bool(row.get("resolves")),
            confirmation=row.get("confirmation"),
            reply=row.get("reply"),
            flow=row.get("flow"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnRecord:
    """What is stored of one turn: its newest real reply and its outcome (either may lack)."""

    reply: MessageRecord | None
    outcome: TurnOutcome | None


def _upsert(insert: Any) -> Any:
    """Insert an outcome; when one is stored already, change only its usage, models,
    sources and flow, and its hand-off when it had none."""
    return _on_conflict(insert(_out))


def _on_conflict(stmt: Any) -> Any:
    """`stmt`, an outcome's INSERT, as `_upsert`'s upsert."""
    return stmt.on_conflict_do_update(
        index_elements=[_out.c.user_message_id],
        set_={
            "usage": stmt.excluded.usage,
            "models": stmt.excluded.models,
            "sources": stmt.excluded.sources,
            # A message with several requests stores its outcome again after each handler,
            # and a later step may hand off: its reason is kept, never a first one replaced.
            "flow": stmt.excluded.flow,
            "handoff": sa.func.coalesce(_out.c.handoff, stmt.excluded.handoff),
        },
    )


_OUTCOME_COLUMNS = [c.name for c in _out.c]
# Built once: `Insert.excluded` alone (its column proxies) costs more than running the SQL.
_SAVE = Statement(
    _upsert(sqlite.insert), postgresql=_upsert(postgresql.insert), columns=_OUTCOME_COLUMNS
)


def save(conn: Connection, outcome: TurnOutcome, *, stored: bool = False) -> Opened | None:
    """Store `outcome`; when one is stored already, only its usage, models, sources and
    flow change, and its hand-off when it had none. `stored`: the caller stored this
    turn's outcome before (`TurnLease.outcome_of`), so an UPDATE of those columns is tried
    first (the finish after the early save: 5 values bound, not 18, no upsert); a row not
    found there after all is upserted as usual.

    An outcome with `handoff` opens the conversation's hand-off in this same transaction
    (`handoff.open_in`), so no crash can leave the reply "a person will take over" without
    the person: when first stored, or when the stored outcome had no hand-off (a later
    request of a message with several handed off after the first step was stored). Stored
    again with its hand-off (a retry, the finish after an early save), it opens nothing.
    Returns the hand-off opened, if this call opened one.
    """
    if stored and outcome.handoff is None and _RESAVE.run(conn, _again(outcome)) == 1:
        return None  # What the upsert would have changed, changed.
    first = False
    if outcome.handoff is not None:
        row = _STORED_HANDOFF.first(conn, {"user_message_id": outcome.user_message_id})
        first = row is None or row["handoff"] is None
    _SAVE.run(conn, _params(outcome))
    if first and outcome.handoff is not None:
        return handoff.open_in(conn, outcome.conversation_id, outcome.handoff)
    return None


# The upsert's change of a stored outcome without a hand-off, as an UPDATE (binds named
# `new_<column>` and `question_id`: an UPDATE reserves its own table's column names).
_AGAIN = ("usage", "models", "sources", "flow")
_RESAVE = Statement(
    sa.update(_out)
    .where(_out.c.user_message_id == sa.bindparam("question_id"))
    .values({name: sa.bindparam(f"new_{name}", type_=_out.c[name].type) for name in _AGAIN})
)


def _again(outcome: TurnOutcome) -> dict[str, Any]:
    return {
        "question_id": outcome.user_message_id,
        "new_usage": outcome.usage,
        "new_models": outcome.models,
        "new_sources": outcome.sources or None,
        "new_flow": outcome.flow,
    }


def row_values(outcome: TurnOutcome) -> dict[str, Any]:
    """The `turn_outcome` row of `outcome` (its values by column; stored now)."""
    return _params(outcome)


def _params(outcome: TurnOutcome) -> dict[str, Any]:
    return {
        "user_message_id": outcome.user_message_id,
        "conversation_id": outcome.conversation_id,
        "category": outcome.category,
        "request": outcome.request,
        "need_more_info": outcome.need_more_info,
        "instruction": outcome.instruction,
        "data": outcome.data,
        "handler_ran": outcome.handler_ran,
        "handoff": outcome.handoff,
        "handler_failed": outcome.handler_failed,
        "usage": outcome.usage,
        "models": outcome.models,
        "sources": outcome.sources or None,
        "confirmation": outcome.confirmation,
        "reply": outcome.reply,
        "flow": outcome.flow,
        "created_at": utcnow(),
        "resolves": outcome.resolves,
    }


def _fenced_upsert() -> Any:
    """`_upsert` on PostgreSQL, behind the lease's fence, in one statement: the row is
    selected `FROM` the fence's CTE, so it is written only while the lease holds."""
    row = sa.select(*(sa.bindparam(c.name, type_=c.type) for c in _out.c)).select_from(FENCE_CTE)
    stmt = postgresql.insert(_out).from_select(_OUTCOME_COLUMNS, row)
    return _on_conflict(stmt).returning(_out.c.user_message_id)


_SAVE_FENCED = Statement(_fenced_upsert(), sqlite=False)


def save_fenced(conn: Connection, outcome: TurnOutcome, fence: dict[str, Any]) -> bool:
    """PostgreSQL: store `outcome` (as `save`, without a hand-off) behind the lease fence
    of `fence` (`TurnLease.fence_params`) in one statement, which can run alone (its own
    transaction: no BEGIN or COMMIT of its own to wait for). Returns whether the lease
    held; when it did not, nothing was written."""
    assert outcome.handoff is None, "a hand-off opens in a transaction: use `save`"
    return _SAVE_FENCED.first(conn, {**_params(outcome), **fence}) is not None


# A turn's stored outcome's hand-off, no row when none is stored (read only for an outcome
# that hands off: the hand-off opens with the first of its saves that carries it).
_STORED_HANDOFF = Statement(
    sa.select(_out.c.handoff).where(_out.c.user_message_id == sa.bindparam("user_message_id"))
)


# The category a turn was routed to (its stored outcome's), its confirmation and its flow
# (the request in progress it left), if any: one primary-key read.
_CATEGORY = Statement(
    sa.select(_out.c.category, _out.c.confirmation, _out.c.flow).where(
        _out.c.user_message_id == sa.bindparam("user_message_id")
    )
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Previous:
    """The turn before on a path, as a new turn's start reads it (`previous_turn`)."""

    user_message_id: str
    category: str | None
    confirmation: dict[str, Any] | None = None
    """Its `TurnOutcome.confirmation`: a request waiting for this turn's yes, or none."""
    flow: dict[str, Any] | None = None
    """Its `TurnOutcome.flow`: the request in progress it left, or the categories it asked
    the customer to choose between (`orchestrator/pending.py`)."""


def previous_turn(
    conn: Connection, path: list[MessageRecord], locked: _writes.Locked | None = None
) -> Previous | None:
    """The user message before the last one on `path`, with the category it was routed to
    (the guess of the request expert a turn runs alongside triage) and its confirmation.
    `locked`: the start's read of the conversation, which holds the outcome of the old
    leaf's parent; used when that is the message found (the usual turn), else read."""
    m = last_question(path[:-1])
    if m is None:
        return None
    if locked is not None and locked.leaf_parent_id == m.id:
        row = locked.leaf_parent_outcome
    else:
        row = _CATEGORY.first(conn, {"user_message_id": m.id})
    if row is None:
        return Previous(user_message_id=m.id, category=None)
    return Previous(
        user_message_id=m.id,
        category=str(row["category"]),
        confirmation=row["confirmation"],
        flow=row["flow"],
    )


def last_question(messages: Sequence[MessageRecord]) -> MessageRecord | None:
    """The last user message of `messages`, or `None`: the turn before a message written
    under the last of them (`previous_turn`, and PostgreSQL's start told the path kept)."""
    for m in reversed(messages):
        if m.role == "user":
            return m
    return None


# Binds not named after the table's columns: through `Connection.execute` (a connection
# with a cursor listener, a tracer) an UPDATE reserves those names for its SET clause.
_SET_CONFIRMATION = Statement(
    sa.update(_out)
    .where(_out.c.user_message_id == sa.bindparam("question_id"))
    .values(confirmation=sa.bindparam("new_confirmation", type_=sa.JSON))
)


def set_confirmation(conn: Connection, user_message_id: str, confirmation: dict[str, Any]) -> None:
    """Replace the confirmation of the turn `user_message_id` (its pending request, now
    answered: a later branch of the conversation finds it answered, not pending)."""
    _SET_CONFIRMATION.run(conn, {"question_id": user_message_id, "new_confirmation": confirmation})


# The newest real reply under a question, and a turn's outcome: built once.
_REPLY = Statement(
    sa.select(_msg)
    .where(
        _msg.c.parent_id == sa.bindparam("question_id"),
        _msg.c.role == "assistant",
        # Not IN (...): an expanding parameter cannot be prebuilt.
        sa.or_(_msg.c.kind == "message", _msg.c.kind == "handoff"),
    )
    .order_by(_msg.c.created_at.desc(), _msg.c.id.desc())
    .limit(1)
)
_OUTCOME = Statement(
    sa.select(_out).where(_out.c.user_message_id == sa.bindparam("user_message_id"))
)


def turn(conn: Connection, user_message_id: str) -> TurnRecord:
    """The newest real reply under `user_message_id` and its outcome: two indexed reads.

    A real reply is the bot's, an operator's, or the waiting marker of a message kept for
    a person (a retry of that message replays it); never a failed-turn marker."""
    reply = _REPLY.first(conn, {"question_id": user_message_id})
    row = _OUTCOME.first(conn, {"user_message_id": user_message_id})
    return TurnRecord(
        reply=None if reply is None else MessageRecord.from_row(reply),
        outcome=None if row is None else TurnOutcome.from_row(row),
    )


def write_reply(conn: Connection, reply: MessageRecord, *, fresh: bool = False) -> None:
    """Store a turn's reply, superseding the failed-turn marker under its question.

    A marker nothing follows is deleted, and the reply takes its place as the active leaf.
    A marker the conversation has moved on from (the user wrote again without retrying)
    stays where it is, and the late reply is stored beside it without moving the active
    leaf, so the path the user is on keeps alternating. `fresh`: the question was added by
    the start of the turn whose fenced transaction this is (`TurnLease.asked`), so no
    marker can be under it and none is looked for.
    """
    assert reply.parent_id is not None, "a reply has a question"
    markers = [] if fresh else _MARKERS.rows(conn, {"question_id": reply.parent_id})
    if not markers:  # The usual turn: no failed try before it.
        _writes.write(conn, reply)
        return
    gone = [row["id"] for row in markers if row["childless"]]
    if gone:
        conn.execute(sa.delete(_msg).where(_msg.c.id.in_(gone)))
    if len(gone) < len(markers):  # The conversation moved on from a marker: keep the leaf.
        conn.execute(sa.insert(_msg), {n: getattr(reply, n) for n in MessageRecord.__slots__})
    else:
        _writes.write(conn, reply)


def _failed_markers() -> sa.Select[Any]:
    """The failed-turn markers under `:question_id`, each with whether nothing follows it."""
    child = _msg.alias("child")
    childless = ~sa.exists().where(child.c.parent_id == _msg.c.id)
    return sa.select(_msg.c.id, childless.label("childless")).where(
        _msg.c.parent_id == sa.bindparam("question_id"),
        _msg.c.role == "assistant",
        _msg.c.kind == "failed",
    )


# One indexed read instead of two, built once.
_MARKERS = Statement(_failed_markers())


def mark_failed(conn: Connection, question: MessageRecord, safe_reply: str) -> MessageRecord | None:
    """Leave `safe_reply` under `question` as a `failed` assistant message (the active leaf).

    Nothing is written when the question already has a reply or a marker (a retry that
    fails again does not stack a second one).
    """
    _writes.lock_conversation(conn, question.conversation_id, None)
    existing = conn.execute(
        sa.select(_msg.c.id)
        .where(_msg.c.parent_id == question.id, _msg.c.role == "assistant")
        .limit(1)
    ).first()
    if existing is not None:
        return None
    return _writes.write_marker(conn, question, safe_reply, "failed")


# The conversation's active leaf, if it is a user message (one primary-key join).
_UNANSWERED_LEAF = Statement(
    sa.select(_msg)
    .select_from(_conv.join(_msg, _msg.c.id == _conv.c.active_leaf_id))
    .where(_conv.c.id == sa.bindparam("conversation_id"), _msg.c.role == "user")
)


def answer_unanswered_leaf(
    conn: Connection, conversation_id: str, client_message_id: str | None
) -> MessageRecord | None:
    """Before a new message follows the active leaf: if that leaf is a user message nobody
    answered (its turn crashed, or stalled and lost its lease, before leaving a marker),
    leave the safe reply under it as a `failed` marker, so the thread still alternates.

    A retry of that very message (the same `client_message_id`) is left alone: it will
    answer the message itself. Run it under the conversation's lease.
    """
    row = _UNANSWERED_LEAF.first(conn, {"conversation_id": conversation_id})
    if row is None:
        return None
    leaf = MessageRecord.from_row(row)
    if client_message_id is not None and leaf.client_message_id == client_message_id:
        return None
    return mark_failed(conn, leaf, SAFE_REPLY)
