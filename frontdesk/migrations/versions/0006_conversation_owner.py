"""Leases carry a fencing token, so that a turn whose lease was taken over cannot write.

The conversation's owner is its `user_id` column (there since `0001_threads`, set from the
first message); this revision adds `lease.token`, a counter that grows by one each time a
new owner takes the lease. Released leases keep their row (expired), so the counter never
goes back.

Revision ID: 0006_conversation_owner
Revises: 0005_turn_outcomes
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_conversation_owner"
down_revision: str | Sequence[str] | None = "0005_turn_outcomes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `lease.token` (0 for leases taken before this revision)."""
    with op.batch_alter_table("lease") as batch:
        batch.add_column(
            sa.Column("token", sa.BigInteger(), nullable=False, server_default=sa.text("0"))
        )


def downgrade() -> None:
    """Drop `lease.token`."""
    with op.batch_alter_table("lease") as batch:
        batch.drop_column("token")
