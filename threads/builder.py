"""The thread builder: from the transcript (a tree) to the user thread the experts read.

The user thread is the path from the root to the message being answered, holding only
user and assistant turns (plus, after compaction, one summary of older turns). It is an
approximation of the transcript that is cheap to send; the transcript is what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

from threads.store import MessageRecord

SUMMARY_LABEL = "Summary of the earlier conversation:"


@dataclass(frozen=True, kw_only=True)
class ThreadMessage:
    """One turn of the user thread."""

    role: Literal["user", "assistant"]
    content: str
    message_id: str | None = None
    """The transcript message behind this turn (`None` for the summary turn)."""


@dataclass(frozen=True, kw_only=True)
class UserThread:
    """What the experts are sent: an optional summary, then whole turns."""

    summary: str | None = None
    messages: list[ThreadMessage] = field(default_factory=list)

    def as_messages(self) -> list[dict[str, str]]:
        """The thread as `{"role", "content"}` dicts, the summary first as a user turn."""
        turns = [{"role": m.role, "content": m.content} for m in self.messages]
        if self.summary:
            return [{"role": "user", "content": f"{SUMMARY_LABEL}\n{self.summary}"}, *turns]
        return turns


class PathSource(Protocol):
    """The part of the store the builder needs."""

    async def path(self, leaf_id: str, *, stop_after: str | None = None) -> list[MessageRecord]:
        """Messages root -> leaf (strictly after `stop_after` when given)."""
        ...


async def build_thread(store: PathSource, leaf_id: str) -> UserThread:
    """The user thread ending at `leaf_id` (a user message being answered, or any message)."""
    path = await store.path(leaf_id)
    return UserThread(
        messages=[ThreadMessage(role=m.role, content=m.content, message_id=m.id) for m in path]
    )
