"""`Handoff`: a conversation a person has, as `Orchestrator.handoffs()` lists it; `Claim`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from frontdesk.threads.handoffs import HandoffRecord


@dataclass(frozen=True, kw_only=True)
class Handoff:
    """One open hand-off of a conversation to a person."""

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
        )


@dataclass(frozen=True, kw_only=True)
class Claim:
    """What `Orchestrator.claim` did: the hand-off now, and who had it before."""

    handoff: Handoff
    previous: str | None
    """The operator it was taken from (a transfer), or `None`."""
