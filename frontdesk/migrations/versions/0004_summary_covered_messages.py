"""Summaries remember how many path messages they cover, so a thread read stops at the cut.

Revision ID: 0004_summary_covered_messages
Revises: 0003_summaries
Create Date: 2025-01-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_summary_covered_messages"
down_revision: str | Sequence[str] | None = "0003_summaries"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `summary.covered_messages` (NULL for summaries written before this revision)."""
    op.add_column("summary", sa.Column("covered_messages", sa.Integer(), nullable=True))


def downgrade() -> None:
    """Drop `summary.covered_messages`."""
    op.drop_column("summary", "covered_messages")
