"""`Memory`: one fact kept about a user across conversations (see docs/memory.md).

A leaf of the package root, so that every layer can name it: the store in `threads`
returns it, a handler's `HandlerContext.memory` writes it, the orchestrator lists it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

__all__ = [
    "MAX_FACT_CHARS",
    "MAX_SUMMARY_CHARS",
    "SOURCES",
    "TRUSTS",
    "Memory",
    "MemorySource",
    "MemoryTrust",
    "default_trust",
]

MAX_FACT_CHARS = 500
"""Longest fact kept (a fact is one short sentence; longer text is refused)."""

MAX_SUMMARY_CHARS = 1_500
"""Longest summary of a past conversation kept as a memory (cut at a word beyond it)."""

MemorySource = Literal["memory_expert", "handler", "user", "operator", "conversation_summary"]
"""Who wrote a fact: the memory expert, a category handler, the user (through the
application), an operator; or `conversation_summary`: the summary of a past conversation
of the user (one per conversation, its `conversation_id` set), kept when it went idle or
was handed back."""

SOURCES: tuple[MemorySource, ...] = (
    "memory_expert",
    "handler",
    "user",
    "operator",
    "conversation_summary",
)

MemoryTrust = Literal["customer", "verified"]
"""Whose word a fact is: `customer` (the customer said it; never the business's word, sent
to experts as "their words, not verified") or `verified` (the business wrote it)."""

TRUSTS: tuple[MemoryTrust, ...] = ("customer", "verified")


def default_trust(source: MemorySource) -> MemoryTrust:
    """A fact's trust when its writer names none: the business's own writers (a handler, an
    operator) are `verified`; whatever comes from the customer is `customer`."""
    return "verified" if source in ("handler", "operator") else "customer"


@dataclass(frozen=True, kw_only=True)
class Memory:
    """One current fact about a user.

    Facts with the same `key` supersede one another (the newest wins); a superseded fact is
    never sent to an expert, and a forgotten one is deleted.
    """

    id: str
    user_id: str
    text: str
    key: str | None
    """Facts with the same key supersede one another (`home_city`, `language`)."""
    source: MemorySource
    conversation_id: str | None
    """The conversation the fact was learnt in, if any."""
    message_id: str | None
    """The user message the fact was learnt from, if any."""
    created_at: datetime
    updated_at: datetime
    trust: MemoryTrust = "customer"
    """`customer`: the customer's word (the memory expert, a past conversation's summary,
    `remember(..., trust="customer")`); `verified`: the business's (a handler's
    `context.memory.remember`, `remember(...)` by default)."""
    profile: str = "default"
    """The profile (business) whose turns recall it: another profile never sees it."""

    @property
    def is_past_conversation(self) -> bool:
        """A past conversation's summary, not a fact (listed and sent as its own kind)."""
        return self.source == "conversation_summary"
