"""Per-user data keys for audit payloads, wrapped by the master key (crypto-shredding).

Each row is one data key of one user for one calendar month (`period`, "YYYY-MM" in UTC):
audit payloads of that user written that month are AES-256-GCM encrypted with it, and the
row keeps it only wrapped by the master key (`FRONTDESK_MASTER_KEY` or a `KeyProvider`,
named by `master_key_id`). Erasure and retention destroy keys (`wrapped_key` emptied,
`destroyed_at` set); the audit rows themselves, and their hash chain, never change.
`user_ref` is a digest of the user id, never the id itself.

Revision ID: 0010_audit_keys
Revises: 0007_audit_guard
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_audit_keys"
down_revision: str | Sequence[str] | None = "0009_handler_scopes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `audit_key`."""
    op.create_table(
        "audit_key",
        sa.Column("kid", sa.String(32), primary_key=True),
        sa.Column("user_ref", sa.String(64), nullable=False),
        sa.Column("period", sa.String(7), nullable=False),
        sa.Column("wrapped_key", sa.Text(), nullable=False),
        sa.Column("master_key_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False, server_default=sa.text("1")),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("destroyed_at", sa.String(40), nullable=True),
    )
    op.create_index("ix_audit_key_user_period", "audit_key", ["user_ref", "period"])
    op.create_index("ix_audit_key_period", "audit_key", ["period"])


def downgrade() -> None:
    """Drop `audit_key` (every encrypted payload becomes unreadable)."""
    op.drop_index("ix_audit_key_period", table_name="audit_key")
    op.drop_index("ix_audit_key_user_period", table_name="audit_key")
    op.drop_table("audit_key")
