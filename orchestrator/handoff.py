"""`Handoff`: a conversation a person has, as `Orchestrator.handoffs()` lists it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from frontdesk.threads.handoff import HandoffRecord


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

    @classmethod
    def of(cls, record: HandoffRecord, now: datetime) -> Handoff:
        """The public view of a stored hand-off at `now`."""
        return cls(
            conversation_id=record.conversation_id,
            user_id=record.user_id,
            reason=record.reason,
            opened_at=record.opened_at,
            waiting_seconds=record.waiting_seconds(now),
        )
