"""Stored turn outcomes (effects at most once per turn) and failed-turn markers.

`turn_outcome` keeps, per user message, what the pipeline decided before the response
expert was called: the category, the request, what was missing, the handler's outcome, and
(once the turn finished) the usage and models of every expert. A retry reads it instead of
running triage, the request expert and the handler again. `message.kind` tells a reply
from the marker a failed turn leaves (its safe reply), so the thread always alternates.

Revision ID: 0005_turn_outcomes
Revises: 0004_summary_covered_messages
Create Date: 2025-01-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_turn_outcomes"
down_revision: str | Sequence[str] | None = "0004_summary_covered_messages"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `turn_outcome`; add `message.kind` ('message' or 'failed')."""
    op.create_table(
        "turn_outcome",
        sa.Column(
            "user_message_id",
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
        sa.Column("category", sa.String(255), nullable=False),
        sa.Column("request", sa.JSON(), nullable=True),
        sa.Column("need_more_info", sa.JSON(), nullable=True),
        sa.Column("instruction", sa.Text(), nullable=False),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("handler_ran", sa.Boolean(), nullable=False),
        sa.Column("usage", sa.JSON(), nullable=False),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.add_column(
        "message", sa.Column("kind", sa.String(16), nullable=False, server_default="message")
    )


def downgrade() -> None:
    """Drop `message.kind` and `turn_outcome`."""
    op.drop_table("turn_outcome")
    # A plain DROP COLUMN (SQLite 3.35+): a batch copy of `message` would cascade-delete
    # every reply when the old table is dropped with foreign keys on.
    op.execute("ALTER TABLE message DROP COLUMN kind")
