"""A conversation records the profile (the business) that answers it.

`conversation.profile` is set by the conversation's first transaction (the upsert that
creates its row) from `handle(..., profile=NAME)`, or the orchestrator's one profile;
later turns, retries, jobs and replays answer with it (docs/profiles.md). Conversations
started before this revision keep `NULL`: any profile of the deployment may answer them.

Revision ID: 0022_profile
Revises: 0021_jobs_wake
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022_profile"
down_revision: str | Sequence[str] | None = "0021_jobs_wake"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `conversation.profile` (nullable: older conversations have none). A plain
    `ALTER TABLE` on both databases: SQLite's batch mode would copy the table, and
    dropping the old one would cascade to the messages."""
    op.add_column("conversation", sa.Column("profile", sa.String(length=64), nullable=True))


def downgrade() -> None:
    """Drop `conversation.profile` (`ALTER TABLE ... DROP COLUMN`, SQLite 3.35 or later)."""
    op.execute("ALTER TABLE conversation DROP COLUMN profile")
