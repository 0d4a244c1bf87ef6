"""The threads tables as SQLModel classes: conversation, message (a tree), lease, handler data.

The tables are created by the Alembic revision `0001_threads`, never by `create_all`; these
classes describe the same columns so that the store can query them. The store works on
their `__table__` with SQLAlchemy Core, which keeps a turn's database time small.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Field, SQLModel

from frontdesk.db import UTCDateTime, utcnow

__all__ = [
    "DEFAULT_PROFILE",
    "Conversation",
    "FeedbackRow",
    "HandlerData",
    "HandoffRow",
    "Lease",
    "Message",
    "TurnOutcomeRow",
    "UTCDateTime",
    "utcnow",
]


DEFAULT_PROFILE = "default"
"""The name of an orchestrator's one profile, and the profile of the facts and documents
stored before they carried one (revision `0030_profile_data`)."""


class Conversation(SQLModel, table=True):
    """One conversation: who it is with, and which message is its active leaf."""

    __tablename__ = "conversation"

    id: str = Field(primary_key=True, max_length=255)
    user_id: str | None = Field(default=None, max_length=255, index=True)
    created_at: datetime = Field(sa_type=UTCDateTime)
    meta: dict[str, Any] = Field(default_factory=dict, sa_column=sa.Column("metadata", sa.JSON()))
    """Free-form JSON about the conversation (the column is named `metadata`)."""
    active_leaf_id: str | None = Field(default=None, max_length=36)
    """The message the next user message answers to; switching branches moves it."""
    resolution: str = Field(
        default="open",
        sa_column=sa.Column(
            "resolution", sa.String(20), nullable=False, server_default="open", index=True
        ),
    )
    """`open`, `resolved`, `assumed_resolved`, `handed_off` or `abandoned` (revision 0026)."""
    resolved_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    resolved_by: str | None = Field(default=None, max_length=16)
    """`customer`, `handler`, `operator` or `timeout`."""
    profile: str | None = Field(default=None, max_length=64)
    """The profile (business) that answers it, set by its first transaction (`None`: a
    conversation from before profiles, which any profile may answer)."""
    path_version: int = Field(
        default=0,
        sa_column=sa.Column("path_version", sa.Integer, nullable=False, server_default="0"),
    )
    """Bumped (by triggers, revision 0037) by every write that can change an existing path
    of the conversation: a message rewritten or deleted, a summary added, rewritten or
    removed. A turn's start reuses its process's cached path while it holds
    (`threads/_path_cache.py`)."""


class Message(SQLModel, table=True):
    """One message of the transcript; `parent_id` links make the conversation a tree."""

    __tablename__ = "message"
    __table_args__ = (
        sa.CheckConstraint("role IN ('user', 'assistant')", name="ck_message_role"),
        sa.UniqueConstraint(
            "conversation_id", "client_message_id", name="uq_message_client_message_id"
        ),
        sa.Index("ix_message_conversation_created", "conversation_id", "created_at"),
        sa.Index("ix_message_parent_created", "parent_id", "created_at"),
    )

    id: str = Field(primary_key=True, max_length=36)
    conversation_id: str = Field(foreign_key="conversation.id", max_length=255, ondelete="CASCADE")
    parent_id: str | None = Field(
        default=None, foreign_key="message.id", max_length=36, ondelete="CASCADE"
    )
    role: str = Field(max_length=16)
    content: str = Field(sa_type=sa.Text)
    created_at: datetime = Field(sa_type=UTCDateTime)
    token_count: int = 0
    client_message_id: str | None = Field(default=None, max_length=255)
    model: str | None = Field(default=None, max_length=255)
    prompt_versions: dict[str, str] | None = Field(default=None, sa_type=sa.JSON)
    kind: str = Field(default="message", max_length=16)
    """`message`, `failed` for the safe reply a failed turn leaves (revision 0005), or
    `handoff` for the waiting message under a user message kept for a person (0011)."""
    author: str = Field(default="user", max_length=300)
    """`user`, `bot`, or `operator:<id>` for a person's reply (revision 0011)."""


class Lease(SQLModel, table=True):
    """A named, expiring lock held by one owner (a turn, a compaction) across processes."""

    __tablename__ = "lease"

    name: str = Field(primary_key=True, max_length=300)
    owner: str = Field(max_length=64)
    expires_at: float
    """Unix time (seconds) after which anyone may take the lease over."""
    token: int = Field(default=0, sa_type=sa.BigInteger)
    """The fencing token: one more each time a new owner takes the lease (never reused)."""


class HandlerData(SQLModel, table=True):
    """A category handler's own JSON values (orders, tickets), keyed by namespace, scope and
    key (revision `0009_handler_scopes` added the scope)."""

    __tablename__ = "handler_data"

    namespace: str = Field(primary_key=True, max_length=255)
    scope: str = Field(primary_key=True, max_length=16)
    """`conversation`, `user` or `everyone`."""
    scope_id: str = Field(primary_key=True, max_length=255)
    """The conversation id, the user id, or `''` for everyone."""
    key: str = Field(primary_key=True, max_length=255)
    value: Any = Field(default=None, sa_type=sa.JSON)
    updated_at: datetime = Field(sa_type=UTCDateTime)


class TurnOutcomeRow(SQLModel, table=True):
    """What one turn decided before its reply was written (revision `0005_turn_outcomes`).

    Stored before the response expert is called, so that a retry of the turn reuses it and
    never runs the handler again; the finishing transaction adds the usage and models.
    """

    __tablename__ = "turn_outcome"
    __table_args__ = (
        sa.Index("ix_turn_outcome_conversation_created", "conversation_id", "created_at"),
    )

    user_message_id: str = Field(
        primary_key=True, foreign_key="message.id", max_length=36, ondelete="CASCADE"
    )
    conversation_id: str = Field(foreign_key="conversation.id", max_length=255, ondelete="CASCADE")
    category: str = Field(max_length=255)
    request: Any = Field(default=None, sa_type=sa.JSON)
    need_more_info: Any = Field(default=None, sa_type=sa.JSON)
    instruction: str = Field(sa_type=sa.Text)
    data: Any = Field(default_factory=dict, sa_type=sa.JSON)
    handler_ran: bool = False
    handoff: str | None = Field(default=None, sa_type=sa.Text)
    """Why a person takes over (revision `0016_hardening`): the hand-off opened with it."""
    handler_failed: bool = False
    """The handler raised; the outcome is the library's apology (revision 0016)."""
    usage: Any = Field(default_factory=dict, sa_type=sa.JSON)
    """Expert name -> `Usage` fields, for the experts that answered this turn."""
    models: Any = Field(default_factory=dict, sa_type=sa.JSON)
    """Expert name -> the model that answered."""
    created_at: datetime = Field(sa_type=UTCDateTime)
    sources: Any = Field(default=None, sa_type=sa.JSON)
    """The passages the reply was given (`Reply.sources`), as JSON (revision 0013)."""
    resolves: bool = Field(
        default=False,
        sa_column=sa.Column("resolves", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    """The handler's `Outcome(resolves=True)` (revision 0026)."""
    confirmation: Any = Field(default=None, sa_type=sa.JSON)
    """A `confirm` category's pending request or the answer to it (revision 0025)."""
    reply: str | None = Field(default=None, sa_type=sa.Text)
    """`Outcome.reply`, the approved words sent verbatim (revision 0025)."""
    flow: Any = Field(default=None, sa_type=sa.JSON)
    """The request in progress, the categories, the language (revision 0028)."""


class HandoffRow(SQLModel, table=True):
    """A person has the conversation from `opened_at` until `closed_at` (revision 0011).

    At most one row per conversation is open (`closed_at` NULL; a partial unique index).
    """

    __tablename__ = "handoff"
    __table_args__ = (
        sa.Index("ix_handoff_conversation", "conversation_id", "opened_at"),
        sa.Index(
            "uq_handoff_open",
            "conversation_id",
            unique=True,
            sqlite_where=sa.text("closed_at IS NULL"),
            postgresql_where=sa.text("closed_at IS NULL"),
        ),
    )

    id: str = Field(primary_key=True, max_length=36)
    conversation_id: str = Field(foreign_key="conversation.id", max_length=255, ondelete="CASCADE")
    reason: str = Field(sa_type=sa.Text)
    opened_at: datetime = Field(sa_type=UTCDateTime)
    waiting_since: datetime | None = Field(default=None, sa_type=UTCDateTime)
    """Since when the user has waited for a person's answer (`None`: answered)."""
    closed_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    closed_by: str | None = Field(default=None, max_length=16)
    """`operator` (handed back) or `timeout` (nobody answered in time)."""
    operator_id: str | None = Field(default=None, max_length=255)
    """The operator who answered last, if any."""
    claimed_by: str | None = Field(default=None, max_length=255)
    """The operator who has claimed it (revision 0015): only they may answer."""
    claimed_at: datetime | None = Field(default=None, sa_type=UTCDateTime)


class FeedbackRow(SQLModel, table=True):
    """A customer's rating of one bot answer (revision 0026): a repeated rating replaces it."""

    __tablename__ = "feedback"
    __table_args__ = (sa.CheckConstraint("rating BETWEEN 1 AND 5", name="ck_feedback_rating"),)

    message_id: str = Field(
        primary_key=True, foreign_key="message.id", max_length=36, ondelete="CASCADE"
    )
    conversation_id: str = Field(
        foreign_key="conversation.id", max_length=255, ondelete="CASCADE", index=True
    )
    user_id: str | None = Field(default=None, max_length=255)
    rating: int
    comment: str | None = Field(default=None, sa_type=sa.Text)
    created_at: datetime = Field(sa_type=UTCDateTime)
