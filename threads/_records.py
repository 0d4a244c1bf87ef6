"""The plain records the store hands out, and the checks on what it is handed."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import RowMapping

from frontdesk.errors import InvalidInput

Role = Literal["user", "assistant"]
Kind = Literal["message", "failed", "handoff"]
"""`failed`: the safe reply a failed turn left under its question (a retry supersedes it);
`handoff`: the waiting message under a user message kept for a person (an operator's
reply supersedes the newest one)."""

BOT = "bot"
"""The author of the assistant messages the experts wrote (and of the waiting messages)."""
USER = "user"
OPERATOR_PREFIX = "operator:"
"""An operator's messages are authored `operator:<operator id>`."""

MAX_ID_LENGTH = 255


@dataclass(frozen=True, kw_only=True, slots=True)
class MessageRecord:
    """One stored message; `parent_id` links make the transcript a tree."""

    id: str
    conversation_id: str
    parent_id: str | None
    role: Role
    content: str
    created_at: datetime
    """tz-aware UTC."""
    token_count: int
    client_message_id: str | None
    model: str | None
    """Assistant messages only: the model spec that wrote the reply."""
    prompt_versions: dict[str, str] | None
    """Assistant messages only: expert name -> "prompt-name@version" used for the reply."""
    kind: Kind = "message"
    """`failed` marks the safe reply of a turn that failed (shown as such in transcripts);
    `handoff` the waiting message under a user message kept for a person."""
    author: str = ""
    """Who wrote it: `user`, `bot`, or `operator:<id>` (empty: taken from the role)."""

    def __post_init__(self) -> None:
        if not self.author:
            object.__setattr__(self, "author", USER if self.role == "user" else BOT)

    @property
    def failed(self) -> bool:
        """Whether this is a failed turn's marker rather than a real reply."""
        return self.kind == "failed"

    @property
    def operator_id(self) -> str | None:
        """The operator who wrote this message, or `None` (the user's or the bot's)."""
        if self.author.startswith(OPERATOR_PREFIX):
            return self.author[len(OPERATOR_PREFIX) :]
        return None

    @classmethod
    def from_row(cls, row: RowMapping | Mapping[str, Any]) -> MessageRecord:
        """Build a record from a `message` row mapping."""
        return cls(
            id=row["id"],
            conversation_id=row["conversation_id"],
            parent_id=row["parent_id"],
            role=cast(Role, row["role"]),
            content=row["content"],
            created_at=row["created_at"],
            token_count=row["token_count"],
            client_message_id=row["client_message_id"],
            model=row["model"],
            prompt_versions=row["prompt_versions"],
            kind=cast(Kind, row["kind"]),
            author=row.get("author") or "",
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ConversationRecord:
    """One conversation's own row."""

    id: str
    user_id: str | None
    created_at: datetime
    metadata: dict[str, Any]
    active_leaf_id: str | None
    """The message the next user message answers to (`None` before the first message)."""
    resolution: str = "open"
    """`open`, `resolved`, `assumed_resolved`, `handed_off` or `abandoned`."""
    resolved_at: datetime | None = None
    resolved_by: str | None = None
    """`customer`, `handler`, `operator` or `timeout`."""
    profile: str | None = None
    """The profile (business) answering it (`None`: a conversation from before profiles)."""


def new_id() -> str:
    """A uuid7-like hex id: time-ordered (milliseconds) then random, 32 characters."""
    value = (time.time_ns() // 1_000_000) << 80 | 0x7 << 76 | secrets.randbits(76)
    return f"{value & ((1 << 128) - 1):032x}"  # `UUID(int=value).hex`, without the object.


def check_text(value: str, what: str) -> str:
    """Refuse text that SQLite would keep and PostgreSQL would not, so both behave the same.

    Raises:
        InvalidInput: `value` is not a string, holds a NUL character, or is not valid Unicode.
    """
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a str, not {type(value).__name__}")
    if "\x00" in value:
        raise InvalidInput(
            f"{what} contains a NUL character (U+0000), which PostgreSQL cannot store; remove it"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidInput(
            f"{what} is not valid Unicode (a lone surrogate at position {e.start}); "
            "decode the input properly"
        ) from e
    return value


def check_id(value: str, what: str) -> str:
    """Refuse an empty, over-long or unstorable id.

    Raises:
        InvalidInput: with what to fix.
    """
    check_text(value, what)
    if not value or len(value) > MAX_ID_LENGTH:
        raise InvalidInput(f"{what} must be 1 to {MAX_ID_LENGTH} characters, got {len(value)}")
    return value
