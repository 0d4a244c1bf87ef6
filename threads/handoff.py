"""Hand-off to a person, as the store keeps it (revision `0011_handoff`): `HandoffStore`,
which conversations a person has and the messages written while they do, and its SQL.

While a conversation has an open `handoff` row, a user message gets no model call: it is
stored with a *waiting marker* under it, an assistant message of kind `handoff` whose text
is the configured waiting message, so the path still alternates user / assistant however
many messages the user sends. An operator's reply supersedes the marker at the active leaf
(the marker is deleted, the reply takes its place under the same user message); when the
leaf is already an assistant message (the bot's "a person will take over", an earlier
operator reply) the reply is stored after it, and the thread builder joins consecutive
assistant messages into one assistant turn. A hand-back closes the row; a timed-out one
also leaves the configured timeout message, placed the same way as an operator's reply.

Every write locks the conversation row, so a hand-off, an operator's reply, a hand-back
and a turn's first transaction (which reads the open hand-off, see
`ConversationStore.start_turn`) never interleave. Each `HandoffStore` write takes an
optional `also`, run in the same transaction with what was written (the orchestrator
writes the audit events there when the audit log shares the database). The module's
functions run inside a caller's transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver import Statement
from frontdesk._driver.tx import run_sync_tx
from frontdesk.errors import ConfigError, HandoffClaimed, NotHandedOff
from frontdesk.threads import _writes
from frontdesk.threads._lease import TurnLease
from frontdesk.threads._records import BOT, MessageRecord, check_id, check_text, new_id
from frontdesk.threads.models import Conversation, HandoffRow, Message, utcnow
from frontdesk.threads.resolution import resolve

_conv = Conversation.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]
_handoff = HandoffRow.__table__  # type: ignore[attr-defined]

__all__ = [
    "DEFAULT_TIMEOUT_MESSAGE",
    "DEFAULT_WAITING_MESSAGE",
    "HandedBack",
    "HandoffPolicy",
    "HandoffRecord",
    "HandoffStore",
    "Opened",
    "Placed",
]

DEFAULT_WAITING_MESSAGE = (
    "Thanks, your message is with our team; a person will answer you here shortly."
)
DEFAULT_TIMEOUT_MESSAGE = (
    "Sorry, nobody from the team is free right now. I'm back and will help you myself;"
    " you can ask for a person again at any time."
)


@dataclass(frozen=True, kw_only=True, slots=True)
class HandoffRecord:
    """One hand-off of a conversation to a person (open while `closed_at` is `None`)."""

    id: str
    conversation_id: str
    user_id: str | None
    """The conversation's owner."""
    reason: str
    opened_at: datetime
    waiting_since: datetime | None
    """Since when the user has waited for a person's answer (`None`: answered)."""
    closed_at: datetime | None = None
    closed_by: str | None = None
    """`operator` (handed back) or `timeout`."""
    operator_id: str | None = None
    """The operator who answered last, if any."""
    claimed_by: str | None = None
    """The operator who has claimed it (only they may answer), or `None`."""
    claimed_at: datetime | None = None
    profile: str | None = None
    """The conversation's profile (`None`: recorded before profiles)."""

    def waiting_seconds(self, now: datetime) -> float:
        """Seconds the user has waited for a person at `now` (0 when answered)."""
        if self.waiting_since is None:
            return 0.0
        return max(0.0, (now - self.waiting_since).total_seconds())

    @classmethod
    def from_row(cls, row: Any) -> HandoffRecord:
        """Build a record from a `handoff` row joined with its conversation's `user_id`."""
        return cls(
            id=row["id"],
            conversation_id=row["conversation_id"],
            user_id=row["user_id"],
            reason=row["reason"],
            opened_at=row["opened_at"],
            waiting_since=row["waiting_since"],
            closed_at=row["closed_at"],
            closed_by=row["closed_by"],
            operator_id=row["operator_id"],
            claimed_by=row["claimed_by"],
            claimed_at=row["claimed_at"],
            profile=row["profile"],
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class HandoffPolicy:
    """How a handed-off conversation answers: the waiting message, and the timeout."""

    waiting_message: str = DEFAULT_WAITING_MESSAGE
    """Stored (and returned) under each user message while a person has the conversation."""
    timeout: float | None = None
    """Seconds a user may wait for a person's answer before the bot takes over again."""
    timeout_message: str = DEFAULT_TIMEOUT_MESSAGE
    """The assistant message a timed-out hand-off leaves when it hands back."""

    def __post_init__(self) -> None:
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigError(
                "HandoffPolicy timeout (handoff_timeout=) must be > 0 seconds or None,"
                f" got {self.timeout}"
            )
        for name, flat, message in (
            ("waiting_message", "handoff_message", self.waiting_message),
            ("timeout_message", "handoff_timeout_message", self.timeout_message),
        ):
            if not isinstance(message, str) or not message.strip() or "\x00" in message:
                raise ConfigError(
                    f"HandoffPolicy {name} ({flat}=) must be a non-empty text without NUL"
                    " characters"
                )


@dataclass(frozen=True, kw_only=True, slots=True)
class Placed:
    """An assistant message written during a hand-off (an operator's, or the timeout's)."""

    message: MessageRecord
    superseded: str | None
    """The id of the waiting marker it replaced, if it replaced one."""
    turn_id: str
    """The audit turn it belongs to: the user message it answers, or its own id when it
    follows another assistant message."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Opened:
    """A hand-off asked for: the open record, whether this call opened it, and the audit
    turn of the active leaf (see `turn_at_leaf`)."""

    handoff: HandoffRecord
    created: bool
    turn_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class Claimed:
    """A hand-off claimed by an operator: the record after, who had it before (a transfer
    when another operator did), and the audit turn of the active leaf."""

    handoff: HandoffRecord
    previous: str | None
    changed: bool
    """False when the operator had it already (nothing was written)."""
    turn_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class HandedBack:
    """A hand-off closed: the closed record, and the timeout message if it left one."""

    handoff: HandoffRecord
    turn_id: str
    """The audit turn of the active leaf after the hand-back (see `turn_at_leaf`)."""
    placed: Placed | None = None
    resolved: bool = False
    """The operator marked the conversation resolved as they handed it back."""


_COLUMNS = (*(c for c in _handoff.c), _conv.c.user_id, _conv.c.profile)
_OPEN = Statement(
    sa.select(*_COLUMNS)
    .select_from(_handoff.join(_conv, _conv.c.id == _handoff.c.conversation_id))
    .where(
        _handoff.c.conversation_id == sa.bindparam("conversation_id"),
        _handoff.c.closed_at.is_(None),
    )
)


def current(conn: Connection, conversation_id: str) -> HandoffRecord | None:
    """The conversation's open hand-off, if any (one indexed read)."""
    row = _OPEN.first(conn, {"conversation_id": conversation_id})
    return None if row is None else HandoffRecord.from_row(row)


def open_ones(conn: Connection) -> list[HandoffRecord]:
    """Every open hand-off, the longest-waiting first (then the oldest)."""
    stmt = (
        sa.select(*_COLUMNS)
        .select_from(_handoff.join(_conv, _conv.c.id == _handoff.c.conversation_id))
        .where(_handoff.c.closed_at.is_(None))
        .order_by(
            _handoff.c.waiting_since.is_(None), _handoff.c.waiting_since, _handoff.c.opened_at
        )
    )
    return [HandoffRecord.from_row(r) for r in conn.execute(stmt).mappings()]


def history(conn: Connection, conversation_id: str) -> list[HandoffRecord]:
    """Every hand-off of the conversation, oldest first."""
    stmt = (
        sa.select(*_COLUMNS)
        .select_from(_handoff.join(_conv, _conv.c.id == _handoff.c.conversation_id))
        .where(_handoff.c.conversation_id == conversation_id)
        .order_by(_handoff.c.opened_at, _handoff.c.id)
    )
    return [HandoffRecord.from_row(r) for r in conn.execute(stmt).mappings()]


def lock_existing(conn: Connection, conversation_id: str) -> None:
    """Lock the conversation row; raise `ConversationNotFound` when there is none."""
    exists, _ = _writes.owner_of(conn, conversation_id)
    if not exists:
        raise _writes.not_found(conversation_id)
    _writes.lock_conversation(conn, conversation_id, None)


def turn_at_leaf(conn: Connection, conversation_id: str) -> str:
    """The audit turn id of the conversation's active leaf: a user message's own id; an
    assistant message's question (its parent) when it answers one, else its own id."""
    leaf_id, _, _ = _writes.lock_conversation(conn, conversation_id, None)
    assert leaf_id is not None, "a conversation exists from its first message"
    leaf = _writes.get(conn, leaf_id)
    if leaf.role == "user" or leaf.parent_id is None:
        return leaf.id
    parent = _writes.get(conn, leaf.parent_id)
    return parent.id if parent.role == "user" else leaf.id


def open_handoff(conn: Connection, conversation_id: str, reason: str) -> Opened:
    """Open a hand-off, or find the open one (`Opened.created` says which).

    Raises:
        ConversationNotFound: no such conversation.
    """
    lock_existing(conn, conversation_id)
    turn_id = turn_at_leaf(conn, conversation_id)
    found = current(conn, conversation_id)
    if found is not None:
        return Opened(handoff=found, created=False, turn_id=turn_id)
    now = utcnow()
    values = {
        "id": new_id(),
        "conversation_id": conversation_id,
        "reason": reason,
        "opened_at": now,
        "waiting_since": now,
        "closed_at": None,
        "closed_by": None,
        "operator_id": None,
        "claimed_by": None,
        "claimed_at": None,
    }
    conn.execute(sa.insert(_handoff).values(**values))
    resolve(conn, conversation_id, "handed_off", None)
    record = current(conn, conversation_id)
    assert record is not None, "the hand-off was just opened"
    return Opened(handoff=record, created=True, turn_id=turn_id)


def open_in(conn: Connection, conversation_id: str, reason: str) -> Opened | None:
    """Open a hand-off inside the caller's write (the one mechanism for "the reply that says
    a person takes over and the hand-off land together"): the turn outcome that carries a
    hand-off reason (`_outcomes.save`) calls it in the transaction storing the outcome.

    Returns the hand-off opened, or None when one was open already.
    """
    opened = open_handoff(conn, conversation_id, reason)
    return opened if opened.created else None


def held(
    conn: Connection, question: MessageRecord, handoff: HandoffRecord, text: str
) -> MessageRecord:
    """Keep `question` for a person: its waiting marker (the active leaf), and the clock.

    Returns the marker. The user starts waiting now unless they already were.
    """
    marker = _writes.write_marker(conn, question, text, "handoff")
    if handoff.waiting_since is None:
        conn.execute(
            sa.update(_handoff)
            .where(_handoff.c.id == handoff.id)
            .values(waiting_since=marker.created_at)
        )
    return marker


def place(conn: Connection, conversation_id: str, text: str, author: str) -> Placed:
    """Write an assistant message at the active leaf during a hand-off (see the module doc).

    A waiting marker at the leaf is superseded: deleted, the message stored under its user
    message. An unanswered user message is answered. After an assistant message the new
    one follows it.
    """
    leaf_id, _, _ = _writes.lock_conversation(conn, conversation_id, None)
    assert leaf_id is not None, "a conversation exists from its first message"
    leaf = _writes.get(conn, leaf_id)
    parent: str = leaf.id
    superseded: str | None = None
    answers = leaf.role == "user"
    if leaf.kind == "handoff":
        assert leaf.parent_id is not None, "a waiting marker is under a user message"
        parent, superseded, answers = leaf.parent_id, leaf.id, True
        conn.execute(sa.delete(_msg).where(_msg.c.id == leaf.id))
    message = _writes.insert(
        conn,
        conversation_id=conversation_id,
        parent_id=parent,
        role="assistant",
        content=text,
        token_count=0,
        author=author,
    )
    turn_id = parent if answers else message.id
    return Placed(message=message, superseded=superseded, turn_id=turn_id)


def claim(conn: Connection, conversation_id: str, operator_id: str) -> Claimed:
    """Give the open hand-off to `operator_id`; from another operator it is a transfer.

    Raises:
        ConversationNotFound: no such conversation.
        NotHandedOff: the conversation is not handed off.
    """
    lock_existing(conn, conversation_id)
    handoff = _require_open(conn, conversation_id)
    turn_id = turn_at_leaf(conn, conversation_id)
    if handoff.claimed_by == operator_id:
        return Claimed(handoff=handoff, previous=None, changed=False, turn_id=turn_id)
    conn.execute(
        sa.update(_handoff)
        .where(_handoff.c.id == handoff.id)
        .values(claimed_by=operator_id, claimed_at=utcnow())
    )
    after = current(conn, conversation_id)
    assert after is not None, "the hand-off is open"
    return Claimed(handoff=after, previous=handoff.claimed_by, changed=True, turn_id=turn_id)


def operator_reply(
    conn: Connection, conversation_id: str, text: str, operator_id: str
) -> tuple[HandoffRecord, Placed]:
    """An operator's reply (see `place`); the user is no longer waiting. A reply on an
    unclaimed hand-off claims it for the operator (the returned record, read before the
    write, then has `claimed_by` `None`: the caller audits the claim).

    Raises:
        ConversationNotFound: no such conversation.
        NotHandedOff: the conversation is not handed off.
        HandoffClaimed: another operator has claimed it.
    """
    lock_existing(conn, conversation_id)
    handoff = _require_open(conn, conversation_id)
    if handoff.claimed_by is not None and handoff.claimed_by != operator_id:
        raise HandoffClaimed(
            f"operator {handoff.claimed_by!r} has claimed conversation {conversation_id!r};"
            " claim it first (POST .../claim) to take it over",
            conversation_id=conversation_id,
            claimed_by=handoff.claimed_by,
        )
    placed = place(conn, conversation_id, text, f"operator:{operator_id}")
    values: dict[str, Any] = {"waiting_since": None, "operator_id": operator_id}
    if handoff.claimed_by is None:
        values |= {"claimed_by": operator_id, "claimed_at": utcnow()}
    conn.execute(sa.update(_handoff).where(_handoff.c.id == handoff.id).values(**values))
    return handoff, placed


def close(
    conn: Connection,
    conversation_id: str,
    *,
    by: str,
    message: str | None = None,
    resolved: bool = False,
) -> HandedBack:
    """Close the open hand-off (`by`: `operator` or `timeout`), leaving `message` if given;
    the conversation is `resolved` by the operator when they say so, else `open` again.

    Raises:
        ConversationNotFound: no such conversation.
        NotHandedOff: the conversation is not handed off.
    """
    lock_existing(conn, conversation_id)
    handoff = _require_open(conn, conversation_id)
    placed = None if message is None else place(conn, conversation_id, message, BOT)
    now = utcnow()
    conn.execute(
        sa.update(_handoff).where(_handoff.c.id == handoff.id).values(closed_at=now, closed_by=by)
    )
    if resolved:
        resolve(conn, conversation_id, "resolved", "operator")
    else:
        resolve(conn, conversation_id, "open", None)
    closed = HandoffRecord(
        id=handoff.id,
        conversation_id=handoff.conversation_id,
        user_id=handoff.user_id,
        reason=handoff.reason,
        opened_at=handoff.opened_at,
        waiting_since=handoff.waiting_since,
        closed_at=now,
        closed_by=by,
        operator_id=handoff.operator_id,
        claimed_by=handoff.claimed_by,
        claimed_at=handoff.claimed_at,
    )
    return HandedBack(
        handoff=closed,
        placed=placed,
        turn_id=turn_at_leaf(conn, conversation_id),
        resolved=resolved,
    )


def expire_due(conn: Connection, conversation_id: str, policy: HandoffPolicy) -> HandedBack | None:
    """Hand back the conversation's hand-off if its user waited past the policy's timeout,
    leaving the timeout message; `None` when nothing was due."""
    if policy.timeout is None:
        return None
    found = current(conn, conversation_id)
    if found is None or not expired(found, policy, utcnow()):
        return None
    return close(conn, conversation_id, by="timeout", message=policy.timeout_message)


def expired(handoff: HandoffRecord, policy: HandoffPolicy, now: datetime) -> bool:
    """Whether the user has waited for a person longer than the policy's timeout."""
    if policy.timeout is None or handoff.waiting_since is None:
        return False
    return now - handoff.waiting_since >= timedelta(seconds=policy.timeout)


def _require_open(conn: Connection, conversation_id: str) -> HandoffRecord:
    found = current(conn, conversation_id)
    if found is None:
        raise NotHandedOff(
            f"conversation {conversation_id!r} is not handed off to a person; call hand_off first",
            conversation_id=conversation_id,
        )
    return found


R = TypeVar("R")
Also = Callable[[Connection, R], None]
"""Run in the write's transaction with its result (an audit batch)."""


class HandoffStore:
    """The hand-offs of one conversation database."""

    def __init__(self, engine: AsyncEngine) -> None:
        """Wrap the conversation store's engine."""
        self.engine = engine

    async def open(
        self, conversation_id: str, reason: str, *, also: Also[Opened] | None = None
    ) -> Opened:
        """Hand the conversation to a person, or find the hand-off already open
        (`Opened.created` says which).

        Raises:
            ConversationNotFound: no such conversation.
        """
        check_id(conversation_id, "conversation_id")
        check_text(reason, "reason")

        def work(conn: Connection) -> Opened:
            opened = open_handoff(conn, conversation_id, reason)
            if also is not None:
                also(conn, opened)
            return opened

        return await run_sync_tx(self.engine, work)

    async def current(self, conversation_id: str) -> HandoffRecord | None:
        """The conversation's open hand-off, if any."""
        return await run_sync_tx(
            self.engine, lambda conn: current(conn, conversation_id), readonly=True
        )

    async def open_ones(self) -> list[HandoffRecord]:
        """Every open hand-off, the longest-waiting user first."""
        return await run_sync_tx(self.engine, open_ones, readonly=True)

    async def history(self, conversation_id: str) -> list[HandoffRecord]:
        """Every hand-off of the conversation, open or closed, oldest first."""
        return await run_sync_tx(
            self.engine, lambda conn: history(conn, conversation_id), readonly=True
        )

    async def claim(
        self, conversation_id: str, operator_id: str, *, also: Also[Claimed] | None = None
    ) -> Claimed:
        """Give the open hand-off to `operator_id` (from another operator: a transfer).

        Raises:
            ConversationNotFound: no such conversation.
            NotHandedOff: the conversation is not handed off.
        """
        check_id(conversation_id, "conversation_id")
        check_id(operator_id, "operator_id")

        def work(conn: Connection) -> Claimed:
            claimed = claim(conn, conversation_id, operator_id)
            if also is not None:
                also(conn, claimed)
            return claimed

        return await run_sync_tx(self.engine, work)

    async def operator_reply(
        self,
        conversation_id: str,
        text: str,
        *,
        operator_id: str,
        lease: TurnLease,
        also: Also[tuple[HandoffRecord, Placed]] | None = None,
    ) -> tuple[HandoffRecord, Placed]:
        """Store an operator's reply as the conversation's next assistant message.

        Waits for `lease` (a turn in flight finishes first), takes it with the write and
        leaves it held: the caller `aclose()`s it.

        Raises:
            ConversationNotFound: no such conversation.
            NotHandedOff: no person has the conversation.
            ConversationBusy: a turn held the conversation past the lease's wait.
        """
        check_id(conversation_id, "conversation_id")
        check_text(text, "text")
        check_id(operator_id, "operator_id")

        def work(conn: Connection) -> tuple[HandoffRecord, Placed]:
            result = operator_reply(conn, conversation_id, text, operator_id)
            if also is not None:
                also(conn, result)
            return result

        result = await lease.take(work)
        assert result is not None, "take returns what the write returned"
        return result

    async def close(
        self,
        conversation_id: str,
        *,
        by: str,
        message: str | None = None,
        lease: TurnLease,
        also: Also[HandedBack] | None = None,
        resolved: bool = False,
    ) -> HandedBack:
        """Hand the conversation back to the bot (`by`: `operator` or `timeout`), leaving
        `message` as an assistant message when given (`resolved`: the operator says the
        customer's matter is done). Takes `lease` as `operator_reply`.

        Raises:
            ConversationNotFound: no such conversation.
            NotHandedOff: no person has the conversation.
            ConversationBusy: a turn held the conversation past the lease's wait.
        """
        check_id(conversation_id, "conversation_id")

        def work(conn: Connection) -> HandedBack:
            result = close(conn, conversation_id, by=by, message=message, resolved=resolved)
            if also is not None:
                also(conn, result)
            return result

        result = await lease.take(work)
        assert result is not None, "take returns what the write returned"
        return result

    async def expire(
        self,
        conversation_id: str,
        policy: HandoffPolicy,
        *,
        lease: TurnLease,
        also: Also[HandedBack | None] | None = None,
    ) -> HandedBack | None:
        """Hand the conversation back, leaving the policy's timeout message, if its user
        has waited past the timeout (checked under the lock); `None` when nothing was due.
        Takes `lease` as `operator_reply`.

        Raises:
            ConversationBusy: a turn held the conversation past the lease's wait.
        """

        def work(conn: Connection) -> tuple[HandedBack | None]:
            result = expire_due(conn, conversation_id, policy)
            if also is not None:
                also(conn, result)
            return (result,)

        taken = await lease.take(work)
        assert taken is not None, "take returns what the write returned"
        return taken[0]
