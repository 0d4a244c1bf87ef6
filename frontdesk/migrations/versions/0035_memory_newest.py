"""A user's current facts in the order of their last update, on PostgreSQL.

A turn's memory lookup reads a user's newest current facts first. PostgreSQL cannot read
that order from `ix_memory_user_current` (`superseded_by IS NULL` is not an equality to
its planner), so it read and sorted every current fact of the user; this partial index
gives the order, and the lookup stops after the newest few. SQLite's
`ix_memory_user_current` already gives it (every SQLite index ends with the rowid, `seq`):
nothing changes there.

Revision ID: 0035_memory_newest
Revises: 0034_category_vectors
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0035_memory_newest"
down_revision: str | Sequence[str] | None = "0034_category_vectors"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """On PostgreSQL, index each user's current facts by their last update."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE INDEX ix_memory_user_newest ON memory (user_id, profile, updated_at, seq)"
            " WHERE superseded_by IS NULL"
        )


def downgrade() -> None:
    """Drop the index (PostgreSQL)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_memory_user_newest")
