"""`audited`: the one path by which a store write and its audit events land together.

A turn's first and last writes, every hand-off write and a customer's rating go through
it: in the write's own transaction when the audit log shares the conversation database,
else right after it, under the data key of the conversation's owner.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, Protocol, TypeVar

import structlog

from frontdesk.audit.events import AuditEvent
from frontdesk.audit.store import Ahead, AuditLog
from frontdesk.db import Connection
from frontdesk.errors import LeaseLost
from frontdesk.threads.store import ConversationStore

log = structlog.get_logger("frontdesk.orchestrator")

R = TypeVar("R")
Also = Callable[[Connection, R], None]
"""What a store write runs last in its transaction, with what it wrote (the audit batch)."""


class Records(Protocol):
    """Where the writes go: the conversation store and the audit log (`turn.Pipeline`)."""

    @property
    def store(self) -> ConversationStore: ...

    @property
    def audit(self) -> AuditLog | None: ...


async def audited(
    p: Records,
    conversation_id: str,
    write: Callable[[Also[R] | None], Awaitable[R]],
    events: Callable[[R], Sequence[AuditEvent]],
    owner: Callable[[R], str | None],
    *,
    apart_if_joint_fails: bool = False,
) -> R:
    """Run `write` (a store write taking an `also`) and audit what it wrote: in its own
    transaction when the audit log shares the database, else right after it.

    The events hold the user's and the operator's words, so they go under the data key of
    the conversation's owner, `owner(result)` (what the write read: no extra statement).
    With `apart_if_joint_fails` (a turn's reply, which must land), a joint transaction that
    fails for any reason but a lost lease is tried again apart: nothing of it was written.
    """
    audit = p.audit
    if audit is None:
        return await write(None)
    if audit.joinable(p.store.engine):
        written: list[tuple[Sequence[AuditEvent], list[str]]] = []
        also = _Joint(audit, conversation_id, events, owner, written)
        try:
            result = await write(also)
        except LeaseLost:  # Another turn has the conversation: nothing may be written.
            raise
        except Exception as e:
            if not apart_if_joint_fails:
                raise
            log.warning("turn.joint_write_failed", conversation_id=conversation_id, error=e)
        else:
            if written:
                # Its prompts and blobs are stored: neither inserted nor looked for again.
                audit.committed(*written[-1], conversation_id)
                return result
            batch = events(result)  # The write did not run `also`: audit it apart.
            if batch:
                await audit.append(conversation_id, batch, user_id=owner(result))
            return result
    result = await write(None)
    batch = events(result)
    if batch:
        await audit.append(conversation_id, batch, user_id=owner(result))
    return result


class _Joint(Generic[R]):
    """The audit batch of a store write, in the write's own transaction: `__call__` writes
    it on the transaction's connection (`AuditLog.append_sync`); `ahead` gives its rows
    before the transaction, for a write made by one call of the database's own
    (`threads/_server_turn.py`), or `None` when they need the database to be made."""

    def __init__(
        self,
        audit: AuditLog,
        conversation_id: str,
        events: Callable[[R], Sequence[AuditEvent]],
        owner: Callable[[R], str | None],
        written: list[tuple[Sequence[AuditEvent], list[str]]],
    ) -> None:
        self.audit = audit
        self.conversation_id = conversation_id
        self.events = events
        self.owner = owner
        self.written = written

    def __call__(self, conn: Connection, result: R) -> None:
        batch = self.events(result)
        blobs = (
            self.audit.append_sync(conn, self.conversation_id, batch, user_id=self.owner(result))
            if batch
            else []
        )
        self.written.append((batch, blobs))

    def ahead(self, result: R) -> Ahead | None:
        batch = self.events(result)
        rows = self.audit.ahead(self.conversation_id, batch, user_id=self.owner(result))
        if rows is not None:
            self.written.append((batch, rows.written))
        return rows
