"""The vectors of the categories' descriptions and examples, per embedder (the router).

An `EmbeddingRouter` embeds each category's description and examples once: the vectors are
kept here by the embedder's name and the text's sha256, so a process that opens finds them
instead of embedding again, and a category whose examples changed gets only its new texts
embedded (`threads/routing.py`).

Revision ID: 0034_category_vectors
Revises: 0033_model_spend
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0034_category_vectors"
down_revision: str | Sequence[str] | None = "0033_model_spend"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `category_vector`, one row per (embedder, text hash)."""
    op.create_table(
        "category_vector",
        sa.Column("embedder", sa.String(255), primary_key=True),
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("dimensions", sa.Integer, nullable=False),
        sa.Column("vector", sa.LargeBinary, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    """Drop `category_vector`."""
    op.drop_table("category_vector")
