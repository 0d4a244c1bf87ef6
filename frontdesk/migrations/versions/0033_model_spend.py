"""Model spend outside turns: the usage of the summariser's and the memory expert's calls.

A turn's usage is kept on its outcome (`turn_outcome.usage`); the background work a turn
leads to (compacting the thread, the memory expert learning from a message) spends tokens
too, kept here per call, by conversation and time, so that a spend limit counts it
(`threads/spend.py`). Only usage and model names, no customer text: like a turn's
usage, erasure keeps it.

Revision ID: 0033_model_spend
Revises: 0031_turn_functions
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0033_model_spend"
down_revision: str | Sequence[str] | None = "0031_turn_functions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `model_spend`, found by conversation and time."""
    op.create_table(
        "model_spend",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("conversation_id", sa.String(255), nullable=False),
        sa.Column("expert", sa.String(32), nullable=False),
        sa.Column("usage", sa.JSON, nullable=False),
        sa.Column("models", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_model_spend_conversation_created", "model_spend", ["conversation_id", "created_at"]
    )


def downgrade() -> None:
    """Drop `model_spend`."""
    op.drop_table("model_spend")
