"""The last path each conversation's turn read in this process, reused while it holds.

A turn's start reads the path from its new message up to the newest summary's cut point,
a recursive walk rebuilt into records every turn, though the path only grew by the
messages this process wrote itself: the turn before's question and reply. Messages are
appended, never moved, so the path to a message is the path to its parent plus the
message, as long as no message on it was rewritten or deleted and no summary changed; every
such write bumps `conversation.path_version` (triggers, revision 0037), which the start
reads with its lock. An entry is used only when the new message's parent is the entry's
leaf and the version is the one the entry was read at; anything else (another process's
turn, an edit, an erasure, a compaction, a rolled-back write) reads the path again. On
PostgreSQL the start's own function makes that check under the lock (`known`, revision
0038) and sends the path back only when it fails.

Entries are immutable; the store changes the mapping only on its event loop, after the
transaction that read or wrote the rows committed, and reads it inside the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass

from frontdesk.threads._records import MessageRecord
from frontdesk.threads.summaries import PathSinceSummary

MAX_CONVERSATIONS = 512
"""Conversations kept (the least recently used goes first)."""
MAX_MESSAGES = 400
"""A longer path (a conversation never compacted) is read every turn, not kept."""


@dataclass(frozen=True, slots=True)
class KnownPath:
    """A conversation's path as this process last read or extended it."""

    leaf_id: str
    """The last message of `path`."""
    version: int
    """The conversation's `path_version` when `path` was read."""
    path: PathSinceSummary


class PathCache:
    """Per conversation, the path to its leaf as this process last read or extended it."""

    def __init__(self) -> None:
        self._entries: dict[str, KnownPath] = {}

    def known(self, conversation_id: str) -> KnownPath | None:
        """The kept path of `conversation_id`, for a start that checks its leaf and version
        itself (PostgreSQL's function, `threads/_server_turn.py`)."""
        return self._entries.get(conversation_id)

    def after(self, message: MessageRecord, version: int) -> PathSinceSummary | None:
        """The path to `message`, just written under its parent: the kept path to that
        parent plus `message`, when the conversation is still at `version`; else `None`."""
        entry = self._entries.get(message.conversation_id)
        if entry is None or entry.version != version or entry.leaf_id != message.parent_id:
            return None
        return plus(entry.path, message)

    def keep(self, path: PathSinceSummary, version: int) -> None:
        """Remember `path` (ending at a message just committed), read at `version`."""
        last = path.messages[-1] if path.messages else None
        if last is None:
            return
        conversation_id = last.conversation_id
        self._entries.pop(conversation_id, None)  # Re-inserted last: the newest used.
        if len(path.messages) > MAX_MESSAGES:
            return
        self._entries[conversation_id] = KnownPath(last.id, version, path)
        if len(self._entries) > MAX_CONVERSATIONS:
            del self._entries[next(iter(self._entries))]

    def extend(self, reply: MessageRecord) -> None:
        """After `reply` committed under the kept path's leaf: keep the path to it (at the
        same version: a write that bumped it meanwhile makes the entry miss)."""
        entry = self._entries.get(reply.conversation_id)
        if entry is not None and entry.leaf_id == reply.parent_id:
            self.keep(plus(entry.path, reply), entry.version)


def plus(path: PathSinceSummary, message: MessageRecord) -> PathSinceSummary:
    """`path` and then `message`, written under its last message."""
    return PathSinceSummary(
        summary=path.summary, messages=[*path.messages, message], replaced=path.replaced
    )
