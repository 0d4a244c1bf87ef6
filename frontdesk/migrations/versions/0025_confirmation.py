"""A turn's confirmation and its approved reply.

`ix_turn_outcome_conversation_created`: a spend limit adds up the usage of a user's or a
conversation's turns over its window (`threads/spend.py`).

`turn_outcome.reply` (Text, NULL unless the handler gave one): `Outcome.reply`, the
approved words sent verbatim; stored with the outcome, so a retry sends them again.

`turn_outcome.confirmation` (JSON, NULL for a turn of a category without `confirm`): on
the turn that asks, the pending request and when it was asked; on the turn that answers,
whether it was confirmed, declined or expired. The next turn reads it with the category
of the turn before (the same primary-key read), so a plain turn pays nothing for it.

Revision ID: 0025_confirmation
Revises: 0023_memory_trust
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025_confirmation"
down_revision: str | Sequence[str] | None = "0023_memory_trust"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `turn_outcome.confirmation` and `turn_outcome.reply`."""
    with op.batch_alter_table("turn_outcome") as batch:
        batch.add_column(sa.Column("confirmation", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("reply", sa.Text(), nullable=True))
    op.create_index(
        "ix_turn_outcome_conversation_created", "turn_outcome", ["conversation_id", "created_at"]
    )


def downgrade() -> None:
    """Drop `turn_outcome.confirmation` and `turn_outcome.reply`."""
    op.drop_index("ix_turn_outcome_conversation_created", table_name="turn_outcome")
    with op.batch_alter_table("turn_outcome") as batch:
        batch.drop_column("reply")
        batch.drop_column("confirmation")
