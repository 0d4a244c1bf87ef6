"""Hand-off to a person: the `handoff` table and who wrote each message (`message.author`).

A conversation is handed off while it has a `handoff` row with no `closed_at`; at most one
is open per conversation (a partial unique index). `message.author` says who wrote a
message: `user`, `bot`, or `operator:<id>` for a person's reply; rows stored before this
revision get `user` or `bot` from their role.

Revision ID: 0011_handoff
Revises: 0007_audit_guard
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_handoff"
down_revision: str | Sequence[str] | None = "0010_audit_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `handoff`; add `message.author` (filled from the role for existing rows)."""
    op.create_table(
        "handoff",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "conversation_id",
            sa.String(255),
            sa.ForeignKey("conversation.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("waiting_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("closed_by", sa.String(16), nullable=True),
        sa.Column("operator_id", sa.String(255), nullable=True),
    )
    op.create_index("ix_handoff_conversation", "handoff", ["conversation_id", "opened_at"])
    op.create_index(
        "uq_handoff_open",
        "handoff",
        ["conversation_id"],
        unique=True,
        sqlite_where=sa.text("closed_at IS NULL"),
        postgresql_where=sa.text("closed_at IS NULL"),
    )
    op.add_column(
        "message", sa.Column("author", sa.String(300), nullable=False, server_default="user")
    )
    op.execute("UPDATE message SET author = 'bot' WHERE role = 'assistant'")


def downgrade() -> None:
    """Drop `message.author` and `handoff`."""
    op.drop_index("uq_handoff_open", table_name="handoff")
    op.drop_index("ix_handoff_conversation", table_name="handoff")
    op.drop_table("handoff")
    # A plain DROP COLUMN (SQLite 3.35+): a batch copy of `message` would cascade-delete
    # every reply when the old table is dropped with foreign keys on.
    op.execute("ALTER TABLE message DROP COLUMN author")
