"""Did it help: a conversation's resolution, a handler's `resolves`, the customer's rating.

`conversation.resolution` is `open`, `resolved`, `assumed_resolved`, `handed_off` or
`abandoned`, with `resolved_at` and `resolved_by` (`customer`, `handler`, `operator`,
`timeout`); indexed, because the assume sweep reads the open ones. `turn_outcome.resolves`
keeps a handler's `Outcome(resolves=True)` with the outcome (a retry reuses it). `feedback`
holds one rating (1-5) and an optional comment per rated message: a repeated rating
replaces the row (its primary key is the message).

Revision ID: 0026_resolution
Revises: 0025_confirmation
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026_resolution"
down_revision: str | Sequence[str] | None = "0025_confirmation"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """The three resolution columns, the outcome's flag and the feedback table."""
    # Plain ALTER TABLE on both databases: a batch (copy and drop) of SQLite's
    # `conversation` would cascade-delete every message with the dropped table.
    op.add_column(
        "conversation",
        sa.Column("resolution", sa.String(20), nullable=False, server_default="open"),
    )
    op.add_column("conversation", sa.Column("resolved_at", sa.DateTime(timezone=True)))
    op.add_column("conversation", sa.Column("resolved_by", sa.String(16)))
    op.create_index("ix_conversation_resolution", "conversation", ["resolution"])
    op.add_column(
        "turn_outcome",
        sa.Column("resolves", sa.Boolean(), nullable=False, server_default=sa.false()),
    )
    op.create_table(
        "feedback",
        sa.Column(
            "message_id",
            sa.String(36),
            sa.ForeignKey("message.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "conversation_id",
            sa.String(255),
            sa.ForeignKey("conversation.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("user_id", sa.String(255), nullable=True),
        sa.Column("rating", sa.Integer(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("rating BETWEEN 1 AND 5", name="ck_feedback_rating"),
    )
    op.create_index("ix_feedback_conversation_id", "feedback", ["conversation_id"])


def downgrade() -> None:
    """Drop the feedback table and the columns."""
    op.drop_index("ix_feedback_conversation_id", table_name="feedback")
    op.drop_table("feedback")
    op.drop_index("ix_conversation_resolution", table_name="conversation")
    # ALTER TABLE ... DROP COLUMN (SQLite 3.35+ too): no table copy, no cascade.
    for table, column in (
        ("turn_outcome", "resolves"),
        ("conversation", "resolved_by"),
        ("conversation", "resolved_at"),
        ("conversation", "resolution"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
