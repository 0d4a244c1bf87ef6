"""Hand-off to a person, as the store keeps it: which conversations a person has, and the
messages written while they do (the SQL and the placement rules are in `_handoff.py`).

Every write locks the conversation row, so a hand-off, an operator's reply, a hand-back
and a turn's first transaction (which reads the open hand-off, see
`ConversationStore.start_turn`) never interleave. Each write takes an optional `also`,
run in the same transaction with what was written (the orchestrator writes the audit
events there when the audit log shares the database).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk.threads import _handoff
from frontdesk.threads._handoff import (
    DEFAULT_TIMEOUT_MESSAGE,
    DEFAULT_WAITING_MESSAGE,
    Claimed,
    HandedBack,
    HandoffPolicy,
    HandoffRecord,
    Opened,
    Placed,
)
from frontdesk.threads._lease import TurnLease
from frontdesk.threads._records import check_id, check_text
from frontdesk.threads._tx import run_sync_tx

__all__ = [
    "Claimed",
    "DEFAULT_TIMEOUT_MESSAGE",
    "DEFAULT_WAITING_MESSAGE",
    "HandedBack",
    "HandoffPolicy",
    "HandoffRecord",
    "HandoffStore",
    "Opened",
    "Placed",
]

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
            opened = _handoff.open_handoff(conn, conversation_id, reason)
            if also is not None:
                also(conn, opened)
            return opened

        return await run_sync_tx(self.engine, work)

    async def current(self, conversation_id: str) -> HandoffRecord | None:
        """The conversation's open hand-off, if any."""
        return await run_sync_tx(
            self.engine, lambda conn: _handoff.current(conn, conversation_id), readonly=True
        )

    async def open_ones(self) -> list[HandoffRecord]:
        """Every open hand-off, the longest-waiting user first."""
        return await run_sync_tx(self.engine, _handoff.open_ones, readonly=True)

    async def history(self, conversation_id: str) -> list[HandoffRecord]:
        """Every hand-off of the conversation, open or closed, oldest first."""
        return await run_sync_tx(
            self.engine, lambda conn: _handoff.history(conn, conversation_id), readonly=True
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
            claimed = _handoff.claim(conn, conversation_id, operator_id)
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
            result = _handoff.operator_reply(conn, conversation_id, text, operator_id)
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
    ) -> HandedBack:
        """Hand the conversation back to the bot (`by`: `operator` or `timeout`), leaving
        `message` as an assistant message when given. Takes `lease` as `operator_reply`.

        Raises:
            ConversationNotFound: no such conversation.
            NotHandedOff: no person has the conversation.
            ConversationBusy: a turn held the conversation past the lease's wait.
        """
        check_id(conversation_id, "conversation_id")

        def work(conn: Connection) -> HandedBack:
            result = _handoff.close(conn, conversation_id, by=by, message=message)
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
            result = _handoff.expire_due(conn, conversation_id, policy)
            if also is not None:
                also(conn, result)
            return (result,)

        taken = await lease.take(work)
        assert taken is not None, "take returns what the write returned"
        return taken[0]
