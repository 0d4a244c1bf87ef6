"""Summaries: the rolling summary of a path prefix, shared by the branches through it.

Revision ID: 0003_summaries
Revises: 0002_audit
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_summaries"
down_revision: str | Sequence[str] | None = "0002_audit"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the summary table."""
    op.create_table(
        "summary",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "conversation_id",
            sa.String(255),
            sa.ForeignKey("conversation.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "covers_until_message_id",
            sa.String(36),
            sa.ForeignKey("message.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("previous_summary_id", sa.String(36), nullable=True),
        sa.UniqueConstraint(
            "conversation_id", "covers_until_message_id", name="uq_summary_covers_until"
        ),
    )


def downgrade() -> None:
    """Drop the summary table."""
    op.drop_table("summary")
