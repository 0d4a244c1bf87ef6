"""Ruled values kept per user: the digest of each `Redact` field value a turn extracted.

A value a customer gave in a ruled field (`Redact("drop")`, `mask`, `pseudonymise`) is
kept after its turn only as a keyed digest with what it is shown as (`[PIN]`,
`******1234`), per user, so every view, export and memory check finds it again in any
conversation of that user (`frontdesk.ruled`). Erasure deletes the user's rows.

Revision ID: 0027_ruled_values
Revises: 0026_resolution
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027_ruled_values"
down_revision: str | Sequence[str] | None = "0026_resolution"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `ruled_value`, one row per (user message, digest), found by user."""
    op.create_table(
        "ruled_value",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.String(255), nullable=False),
        sa.Column("conversation_id", sa.String(255), nullable=False),
        sa.Column("message_id", sa.String(64), nullable=False),
        sa.Column("field", sa.Text, nullable=False),
        sa.Column("rule", sa.String(16), nullable=False),
        sa.Column("shown", sa.Text, nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("length", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_ruled_value_message_digest", "ruled_value", ["message_id", "digest"], unique=True
    )
    op.create_index("ix_ruled_value_user", "ruled_value", ["user_id"])
    op.create_index("ix_ruled_value_conversation", "ruled_value", ["conversation_id"])


def downgrade() -> None:
    """Drop `ruled_value`."""
    op.drop_table("ruled_value")
