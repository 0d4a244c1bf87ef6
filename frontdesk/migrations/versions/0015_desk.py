"""The operator desk: who has claimed a hand-off (`handoff.claimed_by`, `claimed_at`).

A hand-off is open for any operator until one claims it; from then on only the claimant
may answer (another operator claims it first: a transfer). Rows stored before this
revision are unclaimed.

Revision ID: 0015_desk
Revises: 0011_handoff
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_desk"
down_revision: str | Sequence[str] | None = "0011_handoff"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `handoff.claimed_by` and `handoff.claimed_at` (both null: unclaimed)."""
    op.add_column("handoff", sa.Column("claimed_by", sa.String(255), nullable=True))
    op.add_column("handoff", sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    """Drop the claim columns (plain DROP COLUMN, SQLite 3.35+: no batch copy)."""
    op.execute("ALTER TABLE handoff DROP COLUMN claimed_at")
    op.execute("ALTER TABLE handoff DROP COLUMN claimed_by")
