"""Threads: conversations, messages as a tree, leases, and the handlers' key-value data.

Revision ID: 0001_threads
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_threads"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create the threads tables."""
    op.create_table(
        "conversation",
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("user_id", sa.String(255), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        # No foreign key: the leaf row is inserted in the same transaction, after this row.
        sa.Column("active_leaf_id", sa.String(36), nullable=True),
    )
    op.create_index("ix_conversation_user_id", "conversation", ["user_id"])
    op.create_table(
        "message",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column(
            "conversation_id",
            sa.String(255),
            sa.ForeignKey("conversation.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "parent_id",
            sa.String(36),
            sa.ForeignKey("message.id", ondelete="CASCADE"),
            nullable=True,
        ),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("client_message_id", sa.String(255), nullable=True),
        sa.Column("model", sa.String(255), nullable=True),
        sa.Column("prompt_versions", sa.JSON(), nullable=True),
        sa.CheckConstraint("role IN ('user', 'assistant')", name="ck_message_role"),
        sa.UniqueConstraint(
            "conversation_id", "client_message_id", name="uq_message_client_message_id"
        ),
    )
    op.create_index("ix_message_conversation_created", "message", ["conversation_id", "created_at"])
    op.create_index("ix_message_parent_created", "message", ["parent_id", "created_at"])
    op.create_table(
        "lease",
        sa.Column("name", sa.String(300), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
    )
    op.create_table(
        "handler_data",
        sa.Column("namespace", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    """Drop the threads tables."""
    op.drop_table("handler_data")
    op.drop_table("lease")
    op.drop_index("ix_message_parent_created", table_name="message")
    op.drop_index("ix_message_conversation_created", table_name="message")
    op.drop_table("message")
    op.drop_index("ix_conversation_user_id", table_name="conversation")
    op.drop_table("conversation")
