"""Hand-off to a person: the `Handoff` view and the writes.

Every write of a hand-off (opening it, a user message kept for the person, an operator's
reply, a hand-back, a timeout) is an audit event in the conversation's chain, written in
the same transaction as the store's write when the audit log shares the database, else
right after it; a turn's last write goes the same way (`turn._finish`). The placement
rules (waiting markers, what an operator's reply supersedes) are the store's:
`threads/handoff.py`.

The timeout is checked by a turn's first transaction (`turn.begin`), by `handoffs()`, and
with no traffic at all by the periodic job `handoff.timeouts` (`timeouts_job`,
docs/jobs.md), derived from the open `handoff` rows every `TIMEOUT_SWEEP` seconds.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import structlog

from frontdesk.audit.events import AuditEvent, EventKind
from frontdesk.errors import ConversationBusy
from frontdesk.jobs.runner import PeriodicJob
from frontdesk.orchestrator.audited import Records, audited
from frontdesk.threads.handoff import (
    Claimed,
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

TIMEOUTS = "handoff.timeouts"
"""The periodic job handing back the hand-offs whose user waited past the timeout."""
TIMEOUT_SWEEP = 1
"""Seconds between two looks for timed-out hand-offs (a divisor of 60)."""


@dataclass(frozen=True, kw_only=True)
class Handoff:
    """One open hand-off of a conversation to a person, as `Orchestrator.handoffs()` lists it."""

    conversation_id: str
    user_id: str | None
    """The conversation's owner (`None` in single-user mode)."""
    reason: str
    """Why it was handed off (the triage expert's reason for a turn routed to a person)."""
    opened_at: datetime
    """When it was handed off (tz-aware UTC)."""
    waiting_seconds: float
    """How long the user has waited for a person's answer: since the hand-off, or since
    their first message after an operator's last reply; 0 while nothing is unanswered."""
    claimed_by: str | None = None
    """The operator who has claimed it (only they may answer), or `None`: anyone may."""
    waiting_since: datetime | None = None
    """Since when the user has waited for a person (`None`: answered)."""
    profile: str | None = None
    """The conversation's profile (`None`: recorded before profiles)."""

    @classmethod
    def of(cls, record: HandoffRecord, now: datetime) -> Handoff:
        """The public view of a stored hand-off at `now`."""
        return cls(
            conversation_id=record.conversation_id,
            user_id=record.user_id,
            reason=record.reason,
            opened_at=record.opened_at,
            waiting_seconds=record.waiting_seconds(now),
            claimed_by=record.claimed_by,
            waiting_since=record.waiting_since,
            profile=record.profile,
        )


@dataclass(frozen=True, kw_only=True)
class Claim:
    """What `Orchestrator.claim` did: the hand-off now, and who had it before."""

    handoff: Handoff
    previous: str | None
    """The operator it was taken from (a transfer), or `None`."""


# -- the writes --------------------------------------------------------------------------


def opened_events(opened: Opened | None) -> list[AuditEvent]:
    """The `hand_off` event of a hand-off a write opened (none when it opened none)."""
    if opened is None or not opened.created:
        return []
    h = opened.handoff
    return [_event("hand_off", opened.turn_id, handoff_id=h.id, reason=h.reason)]


async def hand_off(p: Records, conversation_id: str, reason: str) -> Handoff:
    """Open (or find) the conversation's hand-off; a new one is audited as `hand_off`."""
    store = p.store.handoffs
    events = opened_events

    opened = await audited(
        p,
        conversation_id,
        lambda also: store.open(conversation_id, reason, also=also),
        events,
        lambda opened: opened.handoff.user_id,
    )
    return Handoff.of(opened.handoff, utcnow())


async def handoffs(
    p: Records, policy: HandoffPolicy, lease_for: Callable[[str], TurnLease]
) -> list[Handoff]:
    """The open hand-offs, the longest-waiting user first, after handing back every one
    whose user waited past the timeout.

    A conversation busy with a turn is left for its next check (that turn's own first
    transaction checks the timeout too).
    """
    store = p.store.handoffs
    still: list[HandoffRecord] = []
    for record in await store.open_ones():
        due = policy.timeout is not None and record.waiting_since is not None
        if not due:
            still.append(record)
        elif not await _expire(p, store, policy, record, lease_for):
            # Not handed back here: busy, not due yet, or handed back meanwhile by the
            # `handoff.timeouts` job; listed only if it is still open.
            current = await store.current(record.conversation_id)
            if current is not None:
                still.append(current)
    now = utcnow()
    return [Handoff.of(r, now) for r in still]


def claimed_event(
    handoff_id: str, turn_id: str, operator_id: str, previous: str | None
) -> AuditEvent:
    """`handoff_claimed`: who has it now, and who had it (a transfer)."""
    return _event(
        "handoff_claimed",
        turn_id,
        handoff_id=handoff_id,
        operator_id=operator_id,
        previous=previous,
        transfer=previous is not None,
    )


async def claim(p: Records, conversation_id: str, operator_id: str) -> Claim:
    """Give the open hand-off to `operator_id`; audited as `handoff_claimed` (a transfer
    when another operator had it), nothing when they had it already."""
    store = p.store.handoffs

    def events(claimed: Claimed) -> list[AuditEvent]:
        if not claimed.changed:
            return []
        return [claimed_event(claimed.handoff.id, claimed.turn_id, operator_id, claimed.previous)]

    claimed = await audited(
        p,
        conversation_id,
        lambda also: store.claim(conversation_id, operator_id, also=also),
        events,
        lambda claimed: claimed.handoff.user_id,
    )
    return Claim(handoff=Handoff.of(claimed.handoff, utcnow()), previous=claimed.previous)


async def operator_reply(
    p: Records, lease: TurnLease, conversation_id: str, text: str, operator_id: str
) -> Placed:
    """Store an operator's reply (under the conversation's lease) and audit it."""
    store = p.store.handoffs

    def events(result: tuple[HandoffRecord, Placed]) -> list[AuditEvent]:
        handoff, placed = result
        claim = []
        if handoff.claimed_by is None:  # the reply claimed it
            claim = [claimed_event(handoff.id, placed.turn_id, operator_id, None)]
        return [
            *claim,
            _event(
                "operator_reply",
                placed.turn_id,
                handoff_id=handoff.id,
                operator_id=operator_id,
                **_placed_payload(placed),
            ),
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
    p: Records,
    lease: TurnLease,
    conversation_id: str,
    *,
    by: str,
    message: str | None = None,
    operator_id: str | None = None,
    resolved: bool = False,
) -> HandedBack:
    """Close the conversation's hand-off (under its lease) and audit it, naming the
    operator who handed it back (`resolved`: they marked the conversation resolved)."""
    store = p.store.handoffs
    try:
        return await audited(
            p,
            conversation_id,
            lambda also: store.close(
                conversation_id, by=by, message=message, lease=lease, also=also, resolved=resolved
            ),
            lambda back: handed_back_events(back, operator_id),
            lambda back: back.handoff.user_id,
        )
    finally:
        await lease.aclose()


def timeouts_job(
    p: Records, policy: HandoffPolicy, lease_for: Callable[[str], TurnLease]
) -> PeriodicJob:
    """`handoff.timeouts`: hand back, with the timeout message, every hand-off whose user
    has waited past `policy.timeout`, whether or not anyone writes (derived from the rows,
    so a tick missed while no runner ran is caught up by the next)."""

    async def sweep() -> None:
        if policy.timeout is None:
            return
        cutoff = utcnow() - timedelta(seconds=policy.timeout)
        store = p.store.handoffs
        for record in await store.open_ones():
            if record.waiting_since is not None and record.waiting_since <= cutoff:
                await _expire(p, store, policy, record, lease_for)

    return PeriodicJob(name=TIMEOUTS, every=TIMEOUT_SWEEP, run=sweep)


async def _expire(
    p: Records,
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


# -- the audit events --------------------------------------------------------------------


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


def handed_back_events(back: HandedBack, operator_id: str | None = None) -> list[AuditEvent]:
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
        _event(
            "hand_back",
            back.turn_id,
            handoff_id=back.handoff.id,
            by=back.handoff.closed_by,
            operator_id=operator_id,
            **({"resolved": True} if back.resolved else {}),
        )
    )
    return batch


def _event(kind: EventKind, turn_id: str, **payload: Any) -> AuditEvent:
    return AuditEvent(kind=kind, turn_id=turn_id, payload=payload)


def _placed_payload(placed: Placed) -> dict[str, Any]:
    return {
        "assistant_message_id": placed.message.id,
        "parent_id": placed.message.parent_id,
        "superseded": placed.superseded,
        "text": placed.message.content,
    }


class Desk(Records, Protocol):
    """What the hand-off namespace works on (`turn.Pipeline`)."""

    @property
    def handoff(self) -> HandoffPolicy: ...

    @property
    def lease(self) -> Callable[[str], TurnLease]: ...

    @property
    def past(self) -> Scheduler | None: ...


class Scheduler(Protocol):
    """Keeps a handed-back conversation's summary for later (`PastConversations`)."""

    def schedule(self, conversation_id: str) -> None: ...


class Handoffs:
    """`Orchestrator.handoffs`: conversations handed to a person, and what operators do
    with them (docs/operations.md). Each method opens the orchestrator on first use."""

    def __init__(
        self, opened: Callable[[], Awaitable[Desk]], check_text: Callable[[str], str]
    ) -> None:
        """`opened`: the orchestrator's records, opened on first call; `check_text`: the
        check an operator's reply passes (as a user message does)."""
        self._opened = opened
        self._check_text = check_text

    async def open(self, conversation_id: str, reason: str) -> Handoff:
        """Hand the conversation to a person: until `hand_back`, each user message is
        stored with the waiting message as its answer and no model is called.

        A turn routed to a person (triage's `HUMAN`) calls this itself. Opening a hand-off
        that is open already returns it unchanged. Audited as `hand_off`.

        Raises:
            ConversationNotFound: no such conversation.
        """
        return await hand_off(await self._opened(), conversation_id, reason)

    async def queue(self) -> list[Handoff]:
        """The conversations a person has, the longest-waiting user first.

        Hand-offs past the policy's timeout are handed back first (with the timeout
        message) and are not listed.
        """
        p = await self._opened()
        return await handoffs(p, p.handoff, p.lease)

    async def claim(self, conversation_id: str, *, operator_id: str) -> Claim:
        """Give a handed-off conversation to one operator: until another claims it (a
        transfer), only they may answer it (`reply` raises `HandoffClaimed` for anyone
        else). Audited as `handoff_claimed`; claiming one's own changes nothing.

        Raises:
            ConversationNotFound: no such conversation.
            NotHandedOff: no person has the conversation (`open` first).
        """
        return await claim(await self._opened(), conversation_id, operator_id)

    async def reply(self, conversation_id: str, text: str, *, operator_id: str) -> str:
        """Answer the user as a person: an assistant message authored `operator:<id>`.

        The thread sees it as an ordinary assistant turn. It takes the place of the
        waiting message at the end of the conversation (if there is one), else it follows
        the last assistant message. Waits for a turn in flight on the conversation.
        Audited as `operator_reply`.

        Returns:
            The new message's id.

        Raises:
            InvalidUserText: empty or unstorable text.
            ConversationNotFound: no such conversation.
            NotHandedOff: no person has the conversation (`open` first).
            HandoffClaimed: another operator has claimed it (`claim` it first).
            ConversationBusy: a turn held the conversation past `lock_timeout`.
        """
        text = self._check_text(text)
        p = await self._opened()
        placed = await operator_reply(
            p, p.lease(conversation_id), conversation_id, text, operator_id
        )
        return placed.message.id

    async def hand_back(
        self, conversation_id: str, *, operator_id: str | None = None, resolved: bool = False
    ) -> None:
        """Give the conversation back to the bot: the next user message is answered by the
        experts, with the whole thread (operator turns included). Audited as `hand_back`.
        With `resolved`, the operator says the customer's matter is done: the conversation
        is `resolved` by `operator` (else it is `open` again).

        Raises:
            ConversationNotFound: no such conversation.
            NotHandedOff: no person has the conversation.
            ConversationBusy: a turn held the conversation past `lock_timeout`.
        """
        p = await self._opened()
        lease = p.lease(conversation_id)
        await hand_back(
            p, lease, conversation_id, by="operator", operator_id=operator_id, resolved=resolved
        )
        if p.past is not None:  # What was said with the person is kept for later (memory).
            p.past.schedule(conversation_id)

    async def __call__(self) -> list[Handoff]:
        """`queue()`: `await orch.handoffs()` (the flat method's form, kept for one release)."""
        return await self.queue()
