"""The SQL of the store's transactions, written once, sync, for both databases.

Each function runs inside a transaction the caller opened: on SQLite a turn's writes run on
a sync engine in one hop to the database's own thread (`frontdesk.db.run_write`); on
PostgreSQL, and for reads, through the async engine's `run_sync`. Statements that cost more
to build than to run are built once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite

from frontdesk._driver import Statement
from frontdesk.errors import (
    ConversationNotFound,
    IdempotencyConflict,
    InvalidInput,
    MessageNotFound,
    MessageNotInConversation,
    ProfileMismatch,
)
from frontdesk.threads._records import Kind, MessageRecord, new_id
from frontdesk.threads.models import Conversation, HandoffRow, Message, TurnOutcomeRow, utcnow

_conv = Conversation.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]
_handoff = HandoffRow.__table__  # type: ignore[attr-defined]
_out = TurnOutcomeRow.__table__  # type: ignore[attr-defined]


class _Unset(enum.Enum):
    UNSET = "UNSET"


UNSET: Final = _Unset.UNSET
"""`parent_id=UNSET` (the default) means "under the conversation's active leaf"."""

ParentId = str | None | _Unset


def add_user(
    conn: Connection,
    conversation_id: str,
    content: str,
    user_id: str | None,
    client_message_id: str | None,
    parent_id: ParentId,
    token_count: int,
    profile: str | None = None,
    *,
    locked: Locked | None = None,
) -> tuple[MessageRecord, bool]:
    """The body of `add_user_message`: idempotent per `client_message_id`, owner checked
    (and the profile, when one is named: a new conversation records it). `locked`: the
    conversation's row as `lock_for_turn` read it in this transaction (else read here).

    Raises:
        ConversationNotFound: the conversation belongs to another user than `user_id`.
        ProfileMismatch: the conversation was recorded with another profile.
    """
    if locked is None:
        leaf_id, existing, owner = lock_conversation(
            conn, conversation_id, user_id, client_message_id, profile=profile
        )
    else:
        leaf_id, existing, owner = locked.leaf_id, locked.existing, locked.owner
    check_owner(conversation_id, owner, user_id)
    if existing is not None:
        assert client_message_id is not None, "only a client message id finds a message"
        if existing.content != content:
            raise IdempotencyConflict(
                f"client_message_id {client_message_id!r} was already used in "
                f"conversation {conversation_id!r} for a different text; "
                "send a new text with a new client_message_id",
                conversation_id=conversation_id,
                client_message_id=client_message_id,
            )
        return existing, False
    if parent_id is UNSET:
        parent = leaf_id  # The conversation's own leaf: no need to check where it lives.
    else:
        parent = parent_id
        if parent is not None:
            message_in(conn, parent, conversation_id)
    record = insert(
        conn,
        conversation_id=conversation_id,
        parent_id=parent,
        role="user",
        content=content,
        token_count=token_count,
        client_message_id=client_message_id,
    )
    return record, True


def add_assistant(conn: Connection, parent_id: str, **values: Any) -> MessageRecord:
    """The body of `add_assistant_message`: a reply under the user message `parent_id`."""
    parent = get(conn, parent_id)
    if parent.role != "user":
        raise InvalidInput(
            f"message {parent_id!r} is an assistant message; a reply goes under a "
            "user message (regenerate under the assistant message's parent)"
        )
    lock_conversation(conn, parent.conversation_id, None)  # Internal: no owner to check.
    return insert(
        conn,
        conversation_id=parent.conversation_id,
        parent_id=parent_id,
        role="assistant",
        **values,
    )


def lock_conversation(
    conn: Connection,
    conversation_id: str,
    user_id: str | None,
    client_message_id: str | None = None,
    *,
    profile: str | None = None,
) -> tuple[str | None, MessageRecord | None, str | None]:
    """Lock the conversation row (creating it if missing, owned by `user_id`, recording
    `profile`).

    Returns its active leaf id, in the same statement the message already stored with
    `client_message_id` (if one is given and found), and the conversation's owner. On
    PostgreSQL this is a row lock (`FOR NO KEY UPDATE`). SQLite drops `FOR UPDATE`
    silently; there the transaction's `BEGIN IMMEDIATE` already holds the write lock.

    Raises:
        ProfileMismatch: `profile` is named and the conversation records another one.
    """
    select, params = _LOCK_CONVERSATION, {"conversation_id": conversation_id}
    if client_message_id is not None:
        select = _LOCK_CONVERSATION_WITH_CLIENT_ID
        params["client_message_id"] = client_message_id
    row = _locked_row(conn, select, params, conversation_id, user_id, profile)
    found = None if client_message_id is None or row["id"] is None else MessageRecord.from_row(row)
    return row["leaf_id"], found, row["owner_id"]


def _locked_row(
    conn: Connection,
    select: Statement,
    params: dict[str, Any],
    conversation_id: str,
    user_id: str | None,
    profile: str | None,
) -> dict[str, Any]:
    """The conversation's row read by `select`, the row created first when missing (an
    upsert, so two first messages never both insert), its profile checked.

    Raises:
        ProfileMismatch: `profile` is named and the conversation records another one.
    """
    row = select.first(conn, params)
    if row is None:
        values = {"id": conversation_id, "user_id": user_id, "created_at": utcnow()}
        _CREATE_IF_MISSING.run(conn, {**values, "metadata": {}, "profile": profile})
        row = select.first(conn, params)
        assert row is not None, "the conversation row exists after the upsert"
    check_profile(conversation_id, row["profile"], profile)
    return row


@dataclass(frozen=True, slots=True)
class Locked:
    """The conversation's row as a turn's start reads it, locked (`lock_for_turn`)."""

    leaf_id: str | None
    existing: MessageRecord | None
    """The message already stored with the turn's `client_message_id`, if any."""
    owner: str | None
    leaf_role: str | None
    """The active leaf's role (`None`: no leaf)."""
    leaf_client_message_id: str | None
    handoff: dict[str, Any] | None
    """The open hand-off's row keyed as `handoff.HandoffRecord.from_row` reads it, when
    asked for and one is open."""
    leaf_parent_id: str | None = None
    """The message the active leaf answers (the turn before's question, usually)."""
    leaf_parent_outcome: dict[str, Any] | None = None
    """That message's stored outcome's category, confirmation and flow, if it has one
    (`_outcomes.previous_turn` uses it when that message is the turn before's)."""
    path_version: int = 0
    """The conversation's `path_version` (`threads/_path_cache.py`)."""

    def unanswered(self, client_message_id: str | None) -> bool:
        """Whether the leaf is a user message nobody answered that is not this very
        message (`_outcomes.answer_unanswered_leaf` would answer it)."""
        if self.leaf_role != "user":
            return False
        return client_message_id is None or self.leaf_client_message_id != client_message_id


def lock_for_turn(
    conn: Connection,
    conversation_id: str,
    user_id: str | None,
    client_message_id: str | None,
    *,
    profile: str | None,
    handoff: bool,
) -> Locked:
    """`lock_conversation` for a turn's start, in the same statement: the active leaf's role
    and client message id (is it an unanswered question?), the path version (is the path
    this process read last still the path?) and, with `handoff`, the open hand-off. One
    read where the start made three (two fewer statements a turn).

    Raises:
        ProfileMismatch: `profile` is named and the conversation records another one.
    """
    select = _LOCK_FOR_TURN[client_message_id is not None, handoff]
    params = {"conversation_id": conversation_id}
    if client_message_id is not None:
        params["client_message_id"] = client_message_id
    row = _locked_row(conn, select, params, conversation_id, user_id, profile)
    found = None if client_message_id is None or row["id"] is None else MessageRecord.from_row(row)
    held = None
    if handoff and row["handoff_id"] is not None:
        held = {name: row[label] for name, label in _HANDOFF_LABELS}
        held["user_id"], held["profile"] = row["owner_id"], row["profile"]
    before = None
    if row["before_category"] is not None:  # Never NULL in a stored outcome.
        before = {name: row[f"before_{name}"] for name in _BEFORE}
    return Locked(
        leaf_id=row["leaf_id"],
        existing=found,
        owner=row["owner_id"],
        leaf_role=row["leaf_role"],
        leaf_client_message_id=row["leaf_client_message_id"],
        handoff=held,
        leaf_parent_id=row["leaf_parent_id"],
        leaf_parent_outcome=before,
        path_version=row["path_version"],
    )


def check_profile(conversation_id: str, recorded: str | None, named: str | None) -> None:
    """Refuse a caller that names another profile than the conversation's own (a
    conversation from before profiles, `recorded=None`, takes any).

    Raises:
        ProfileMismatch: both are named and differ.
    """
    if named is not None and recorded is not None and named != recorded:
        raise ProfileMismatch(
            f"conversation {conversation_id!r} belongs to profile {recorded!r}, not {named!r};"
            f" name profile={recorded!r} (or none) for it, or start a new conversation",
            conversation_id=conversation_id,
            recorded=recorded,
            named=named,
        )


def create_conversation(
    conn: Connection, conversation_id: str, user_id: str | None, profile: str | None = None
) -> None:
    """Insert an empty conversation owned by `user_id` (an id already taken raises)."""
    conn.execute(
        sa.insert(_conv).values(
            id=conversation_id,
            user_id=user_id,
            created_at=utcnow(),
            metadata={},
            profile=profile,
        )
    )


def check_owner(conversation_id: str, owner: str | None, user_id: str | None) -> None:
    """Refuse a caller who is not the conversation's owner, as if it did not exist.

    `user_id=None` (single-user mode) reaches only conversations that have no owner.

    Raises:
        ConversationNotFound: `user_id` is not `owner`.
    """
    if owner != user_id:
        raise not_found(conversation_id)


def not_found(conversation_id: str) -> ConversationNotFound:
    """The one error for a conversation that is missing or someone else's (no probing)."""
    return ConversationNotFound(
        f"no conversation {conversation_id!r} for this user; check the conversation id and "
        "the user_id it was started with",
        conversation_id=conversation_id,
    )


def owner_of(conn: Connection, conversation_id: str) -> tuple[bool, str | None]:
    """Whether the conversation exists, and its owner (`None`: single-user mode)."""
    stmt = sa.select(_conv.c.user_id).where(_conv.c.id == conversation_id)
    row = conn.execute(stmt).first()
    return (False, None) if row is None else (True, row[0])


def owner_and_profile(
    conn: Connection, conversation_id: str
) -> tuple[bool, str | None, str | None]:
    """Whether the conversation exists, its owner, and its recorded profile."""
    stmt = sa.select(_conv.c.user_id, _conv.c.profile).where(_conv.c.id == conversation_id)
    row = conn.execute(stmt).first()
    return (False, None, None) if row is None else (True, row[0], row[1])


def _lock_conversation_query(with_client_id: bool) -> sa.Select[Any]:
    leaf = _conv.c.active_leaf_id.label("leaf_id")
    owner = _conv.c.user_id.label("owner_id")
    profile = _conv.c.profile.label("profile")
    by_id = _conv.c.id == sa.bindparam("conversation_id")
    if not with_client_id:
        return sa.select(leaf, owner, profile).where(by_id).with_for_update(key_share=True)
    sent = sa.and_(
        _msg.c.conversation_id == _conv.c.id,
        _msg.c.client_message_id == sa.bindparam("client_message_id"),
    )
    return (
        sa.select(leaf, owner, profile, _msg)
        .select_from(_conv.outerjoin(_msg, sent))
        .where(by_id)
        .with_for_update(of=_conv, key_share=True)
    )


_BEFORE = ("category", "confirmation", "flow")


def _lock_for_turn_query(with_client_id: bool, with_handoff: bool) -> sa.Select[Any]:
    """`_lock_conversation_query` with the conversation's path version, the leaf's role,
    client message id and parent, the parent's stored outcome (labelled `before_<name>`:
    the turn before's route, read by the start anyway), and the open hand-off's columns
    (labelled `handoff_<name>`) when `with_handoff`."""
    stmt = _lock_conversation_query(with_client_id)
    leaf = _msg.alias("leaf")
    joined = (
        stmt.get_final_froms()[0]
        .outerjoin(leaf, leaf.c.id == _conv.c.active_leaf_id)
        .outerjoin(_out, _out.c.user_message_id == leaf.c.parent_id)
    )
    columns = [
        _conv.c.path_version.label("path_version"),
        leaf.c.role.label("leaf_role"),
        leaf.c.client_message_id.label("leaf_client_message_id"),
        leaf.c.parent_id.label("leaf_parent_id"),
        *(_out.c[name].label(f"before_{name}") for name in _BEFORE),
    ]
    if with_handoff:
        # At most one open hand-off per conversation (the partial unique index `uq_handoff_open`).
        is_open = sa.and_(_handoff.c.conversation_id == _conv.c.id, _handoff.c.closed_at.is_(None))
        joined = joined.outerjoin(_handoff, is_open)
        columns += [c.label(f"handoff_{c.name}") for c in _handoff.c]
    return stmt.select_from(joined).add_columns(*columns).with_for_update(of=_conv, key_share=True)


_HANDOFF_LABELS = [(c.name, f"handoff_{c.name}") for c in _handoff.c]


# Built once: building a statement costs more than running it on SQLite.
def _create_if_missing(dialect: Any) -> Any:
    return dialect.insert(_conv).on_conflict_do_nothing(index_elements=[_conv.c.id])


_CREATE_IF_MISSING = Statement(
    _create_if_missing(sqlite),
    postgresql=_create_if_missing(postgresql),
    columns=["id", "user_id", "created_at", "metadata", "profile"],
)
"""A new conversation's row, unless another turn made it first (each new conversation's
first turn: built once, not per call)."""

_LOCK_CONVERSATION = Statement(_lock_conversation_query(with_client_id=False))
_LOCK_CONVERSATION_WITH_CLIENT_ID = Statement(_lock_conversation_query(with_client_id=True))
_LOCK_FOR_TURN = {
    (client_id, handoff): Statement(_lock_for_turn_query(client_id, handoff))
    for client_id in (False, True)
    for handoff in (False, True)
}


def get(conn: Connection, message_id: str) -> MessageRecord:
    """The message `message_id`.

    Raises:
        MessageNotFound: there is none.
    """
    row = conn.execute(sa.select(_msg).where(_msg.c.id == message_id)).mappings().first()
    if row is None:
        raise MessageNotFound(f"no message {message_id!r}", message_id=message_id)
    return MessageRecord.from_row(row)


def message_in(conn: Connection, message_id: str, conversation_id: str) -> None:
    """Check that `message_id` exists and belongs to `conversation_id`.

    Raises:
        MessageNotFound: no such message.
        MessageNotInConversation: it belongs to another conversation.
    """
    stmt = sa.select(_msg.c.conversation_id).where(_msg.c.id == message_id)
    owner = conn.execute(stmt).scalar()
    if owner is None:
        raise MessageNotFound(f"no message {message_id!r}", message_id=message_id)
    if owner != conversation_id:
        raise MessageNotInConversation(
            f"message {message_id!r} is not in conversation {conversation_id!r}",
            message_id=message_id,
        )


def by_client_id(
    conn: Connection, conversation_id: str, client_message_id: str
) -> MessageRecord | None:
    """The message sent with `client_message_id` in the conversation, if any."""
    stmt = sa.select(_msg).where(
        _msg.c.conversation_id == conversation_id,
        _msg.c.client_message_id == client_message_id,
    )
    row = conn.execute(stmt).mappings().first()
    return None if row is None else MessageRecord.from_row(row)


def insert(conn: Connection, **values: Any) -> MessageRecord:
    """Insert a new message (id and time assigned here) as its conversation's leaf."""
    values.setdefault("client_message_id", None)
    values.setdefault("model", None)
    values.setdefault("prompt_versions", None)
    record = MessageRecord(id=new_id(), created_at=utcnow(), **values)
    write(conn, record)
    return record


_INSERT_MESSAGE = Statement(sa.insert(_msg), columns=MessageRecord.__slots__)
_SET_LEAF = Statement(
    sa.update(_conv)
    .where(_conv.c.id == sa.bindparam("conversation"))
    .values(active_leaf_id=sa.bindparam("leaf"))
)


def _insert_as_leaf() -> Any:
    """PostgreSQL: the message inserted and made its conversation's leaf in one statement
    (the UPDATE reads the id from the INSERT, a CTE): a round trip fewer, twice a turn."""
    names = MessageRecord.__slots__
    # Binds named `new_<column>`: an UPDATE reserves its own table's column names (`id`).
    row = sa.select(*(sa.bindparam(f"new_{name}", type_=_msg.c[name].type) for name in names))
    added = postgresql.insert(_msg).from_select(names, row)
    new = added.returning(_msg.c.id, _msg.c.conversation_id).cte("new_message")
    return (
        sa.update(_conv).where(_conv.c.id == new.c.conversation_id).values(active_leaf_id=new.c.id)
    )


_INSERT_AS_LEAF = Statement(_insert_as_leaf(), sqlite=False)


def write(conn: Connection, record: MessageRecord) -> None:
    """Insert `record` and make it its conversation's active leaf."""
    if conn.dialect.name == "postgresql":
        _INSERT_AS_LEAF.run(conn, {f"new_{k}": v for k, v in _as_row(record).items()})
        return
    _INSERT_MESSAGE.run(conn, _as_row(record))
    _SET_LEAF.run(conn, {"conversation": record.conversation_id, "leaf": record.id})


def write_marker(conn: Connection, question: MessageRecord, text: str, kind: Kind) -> MessageRecord:
    """Write an assistant message of `kind` (`failed`, `handoff`) under `question`, the
    bot's, counting no tokens (a marker is not a model's answer), and return it."""
    marker = MessageRecord(
        id=new_id(),
        created_at=utcnow(),
        conversation_id=question.conversation_id,
        parent_id=question.id,
        role="assistant",
        content=text,
        token_count=0,
        client_message_id=None,
        model=None,
        prompt_versions=None,
        kind=kind,
    )
    write(conn, marker)
    return marker


def set_leaf(conn: Connection, conversation_id: str, message_id: str) -> str:
    """Make the newest leaf under `message_id` (checked to be in the conversation) the
    conversation's active leaf; returns that leaf's id (`message_id` itself if a leaf).

    A non-leaf is resolved rather than refused: the active leaf must be a leaf, or the next
    turn would hang a second branch under it and drop the replies below it from the thread.
    """
    message_in(conn, message_id, conversation_id)
    leaf = newest_leaf_under(conn, message_id)
    _SET_LEAF.run(conn, {"conversation": conversation_id, "leaf": leaf})
    return leaf


def newest_leaf_under(conn: Connection, message_id: str) -> str:
    """The newest (by creation time, then id) leaf of the subtree rooted at `message_id`."""
    down = sa.select(_msg.c.id, _msg.c.created_at).where(_msg.c.id == message_id)
    walk = down.cte("subtree", recursive=True)
    child = _msg.alias("child")
    walk = walk.union_all(
        sa.select(child.c.id, child.c.created_at).join(walk, child.c.parent_id == walk.c.id)
    )
    below = _msg.alias("below")
    is_leaf = ~sa.exists().where(below.c.parent_id == walk.c.id)
    stmt = (
        sa.select(walk.c.id)
        .where(is_leaf)
        .order_by(walk.c.created_at.desc(), walk.c.id.desc())
        .limit(1)
    )
    found = conn.execute(stmt).scalar()
    return message_id if found is None else str(found)


def _as_row(record: MessageRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in MessageRecord.__slots__}


def path_query(leaf_id: str, stop_after: str | None, last: int | None) -> sa.Select[Any]:
    """The path from the root to `leaf_id` (root first) by one recursive query."""
    walk = (
        sa.select(_msg.c.id, _msg.c.parent_id, sa.literal(0).label("depth"))
        .where(_msg.c.id == leaf_id)
        .cte("walk", recursive=True)
    )
    up = _msg.alias("up")
    step = sa.select(up.c.id, up.c.parent_id, walk.c.depth + 1).join(
        walk, up.c.id == walk.c.parent_id
    )
    if stop_after is not None:
        step = step.where(up.c.id != stop_after)
    if last is not None:
        step = step.where(walk.c.depth < last - 1)
    walk = walk.union_all(step)
    return sa.select(_msg).join(walk, _msg.c.id == walk.c.id).order_by(walk.c.depth.desc())
