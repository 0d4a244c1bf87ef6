"""Hand-off to a person, for the `Orchestrator`: the store's writes and their audit events.

Every write of a hand-off (opening it, a user message kept for the person, an operator's
reply, a hand-back, a timeout) is an audit event in the conversation's chain, written in
the same transaction as the store's write when the audit log shares the database, else
right after it (as a turn's batch is). The placement rules (waiting markers, what an
operator's reply supersedes) are the store's: `threads/_handoff.py`.

The timeout is checked by a turn's first transaction (`start_turn`), by `handoffs()`, and
without any traffic by the periodic job `handoff.timeouts` (`timeouts_job`, docs/jobs.md),
derived from the open `handoff` rows every `TIMEOUT_SWEEP` seconds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

import structlog
from sqlalchemy import Connection

from frontdesk.audit.events import AuditEvent, EventKind
from frontdesk.errors import ConversationBusy
from frontdesk.orchestrator.jobs import PeriodicJob
from frontdesk.orchestrator.turn import Pipeline
from frontdesk.threads.handoffs import (
    HandedBack,
    HandoffPolicy,
    HandoffRecord,
    HandoffStore,
    Opened,
    Placed,
)
from frontdesk.threads.models import utcnow
from frontdesk.threads.store import TurnLease, TurnStart

log = structlog.get_logger("frontdesk.orchestrator")

R = TypeVar("R")
Also = Callable[[Connection, R], None]

TIMEOUTS = "handoff.timeouts"
"""The periodic job handing back the hand-offs whose user waited past the timeout."""
TIMEOUT_SWEEP = 1
"""Seconds between two looks for timed-out hand-offs (a divisor of 60)."""


async def audited(
    p: Pipeline,
    conversation_id: str,
    write: Callable[[Also[R] | None], Awaitable[R]],
    events: Callable[[R], list[AuditEvent]],
    owner: Callable[[R], str | None],
) -> R:
    """Run `write` (a store write taking an `also`) and audit what it wrote: in its own
    transaction when the audit log shares the database, else right after it. The events
    hold the user's and the operator's words, so they go under the data key of the
    conversation's owner, `owner(result)` (what the write read: no extra statement)."""
    audit = p.audit
    if audit is None:
        return await write(None)
    joint = audit.joinable(p.store.engine)
    written: list[bool] = []

    def also(conn: Connection, result: R) -> None:
        batch = events(result)
        if batch:
            audit.append_sync(conn, conversation_id, batch, user_id=owner(result))
        written.append(True)

    result = await write(also if joint else None)
    if not written:
        batch = events(result)
        if batch:
            await audit.append(conversation_id, batch, user_id=owner(result))
    return result


def _event(kind: EventKind, turn_id: str, **payload: Any) -> AuditEvent:
    return AuditEvent(kind=kind, turn_id=turn_id, payload=payload)


def held_events(begun: TurnStart, user_id: str | None) -> list[AuditEvent]:
    """The events of a turn's first transaction that concern a hand-off: a timed-out one
    handed back, and a message kept for the person (its `turn_started`, then its marker)."""
    batch = [] if begun.handed_back is None else handed_back_events(begun.handed_back)
    if begun.answer is not None and begun.handoff is not None:
        q = begun.message
        batch.append(
            _event(
                "turn_started",
                q.id,
                user_message_id=q.id,
                client_message_id=q.client_message_id,
                parent_id=q.parent_id,
                text=q.content,
                user_id=user_id,
                handoff_id=begun.handoff.id,
            )
        )
        batch.append(
            _event(
                "handoff_held",
                q.id,
                handoff_id=begun.handoff.id,
                assistant_message_id=begun.answer.id,
                text=begun.answer.content,
            )
        )
    return batch


def _placed_payload(placed: Placed) -> dict[str, Any]:
    return {
        "assistant_message_id": placed.message.id,
        "parent_id": placed.message.parent_id,
        "superseded": placed.superseded,
        "text": placed.message.content,
    }


def handed_back_events(back: HandedBack) -> list[AuditEvent]:
    """A hand-back: the timeout's message (if it left one), then `hand_back`."""
    batch = []
    if back.placed is not None:
        batch.append(
            _event(
                "handoff_timeout",
                back.placed.turn_id,
                handoff_id=back.handoff.id,
                **_placed_payload(back.placed),
            )
        )
    batch.append(
        _event("hand_back", back.turn_id, handoff_id=back.handoff.id, by=back.handoff.closed_by)
    )
    return batch


async def start_turn(
    p: Pipeline,
    policy: HandoffPolicy,
    conversation_id: str,
    text: str,
    *,
    lease: TurnLease,
    user_id: str | None,
    **kwargs: Any,
) -> TurnStart:
    """`ConversationStore.start_turn` reading the hand-off (`policy`), with the audit events
    of what it wrote for one (a message kept for a person, a timed-out hand-back)."""

    def write(also: Also[TurnStart] | None) -> Awaitable[TurnStart]:
        return p.store.start_turn(
            conversation_id, text, lease=lease, user_id=user_id, handoff=policy, also=also, **kwargs
        )

    return await audited(
        p, conversation_id, write, lambda begun: held_events(begun, user_id), lambda _: user_id
    )


async def hand_off(p: Pipeline, conversation_id: str, reason: str) -> HandoffRecord:
    """Open (or find) the conversation's hand-off; a new one is audited as `hand_off`."""
    store = HandoffStore(p.store.engine)

    def events(opened: Opened) -> list[AuditEvent]:
        if not opened.created:
            return []
        h = opened.handoff
        return [_event("hand_off", opened.turn_id, handoff_id=h.id, reason=h.reason)]

    opened = await audited(
        p,
        conversation_id,
        lambda also: store.open(conversation_id, reason, also=also),
        events,
        lambda opened: opened.handoff.user_id,
    )
    return opened.handoff


async def operator_reply(
    p: Pipeline, lease: TurnLease, conversation_id: str, text: str, operator_id: str
) -> Placed:
    """Store an operator's reply (under the conversation's lease) and audit it."""
    store = HandoffStore(p.store.engine)

    def events(result: tuple[HandoffRecord, Placed]) -> list[AuditEvent]:
        handoff, placed = result
        return [
            _event(
                "operator_reply",
                placed.turn_id,
                handoff_id=handoff.id,
                operator_id=operator_id,
                **_placed_payload(placed),
            )
        ]

    try:
        _, placed = await audited(
            p,
            conversation_id,
            lambda also: store.operator_reply(
                conversation_id, text, operator_id=operator_id, lease=lease, also=also
            ),
            events,
            lambda result: result[0].user_id,
        )
    finally:
        await lease.aclose()
    return placed


async def hand_back(
    p: Pipeline, lease: TurnLease, conversation_id: str, *, by: str, message: str | None = None
) -> HandedBack:
    """Close the conversation's hand-off (under its lease) and audit it."""
    store = HandoffStore(p.store.engine)
    try:
        return await audited(
            p,
            conversation_id,
            lambda also: store.close(
                conversation_id, by=by, message=message, lease=lease, also=also
            ),
            handed_back_events,
            lambda back: back.handoff.user_id,
        )
    finally:
        await lease.aclose()


async def expire_due(
    p: Pipeline, policy: HandoffPolicy, lease_for: Callable[[str], TurnLease]
) -> list[HandoffRecord]:
    """Hand back every hand-off whose user waited past the timeout; returns those still open.

    A conversation busy with a turn is left for its next check (that turn's own first
    transaction checks the timeout too).
    """
    store = HandoffStore(p.store.engine)
    still: list[HandoffRecord] = []
    for record in await store.open_ones():
        due = policy.timeout is not None and record.waiting_since is not None
        if not due or not await _expire(p, store, policy, record, lease_for):
            still.append(record)
    return still


def timeouts_job(
    p: Pipeline, policy: HandoffPolicy, lease_for: Callable[[str], TurnLease]
) -> PeriodicJob:
    """`handoff.timeouts`: hand back, with the timeout message, every hand-off whose user
    has waited past `policy.timeout`, whether or not anyone writes (derived from the rows,
    so a tick missed while no runner ran is caught up by the next)."""

    async def sweep() -> None:
        if policy.timeout is None:
            return
        cutoff = utcnow() - timedelta(seconds=policy.timeout)
        store = HandoffStore(p.store.engine)
        for record in await store.open_ones():
            if record.waiting_since is not None and record.waiting_since <= cutoff:
                await _expire(p, store, policy, record, lease_for)

    return PeriodicJob(name=TIMEOUTS, every=TIMEOUT_SWEEP, run=sweep)


async def _expire(
    p: Pipeline,
    store: HandoffStore,
    policy: HandoffPolicy,
    record: HandoffRecord,
    lease_for: Callable[[str], TurnLease],
) -> bool:
    """Hand back one hand-off if it is past its timeout; whether it was."""
    cid = record.conversation_id
    lease = lease_for(cid)

    def events(back: HandedBack | None) -> list[AuditEvent]:
        return [] if back is None else handed_back_events(back)

    try:
        back = await audited(
            p,
            cid,
            lambda also: store.expire(cid, policy, lease=lease, also=also),
            events,
            lambda _: record.user_id,
        )
    except ConversationBusy:
        return False
    except Exception:  # One conversation's failure must not hide the others.
        log.exception("handoff.timeout_failed", conversation_id=cid)
        return False
    finally:
        await lease.aclose()
    return back is not None
