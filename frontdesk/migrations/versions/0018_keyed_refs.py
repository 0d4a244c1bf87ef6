"""The ref key: user ids are filed under keyed digests, not plain ones.

A user's data keys, audit chain, erased conversations and memory jobs name the user by a
digest. A plain SHA-256 of a short id is inverted by trying every id, so with a master key
they are HMACs under a ref key: 32 random bytes per database, stored only wrapped by the
master key in `audit_ref_key` (see `frontdesk.audit.refs`). The row is made on the first
open with a master key; nothing stored before is rewritten here (the plain digests cannot
be turned into keyed ones without the user ids): erasure finds and re-files them.

Revision ID: 0018_keyed_refs
Revises: 0014_audit_blobs
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_keyed_refs"
down_revision: str | Sequence[str] | None = "0014_audit_blobs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Create `audit_ref_key`."""
    op.create_table(
        "audit_ref_key",
        sa.Column("name", sa.String(32), primary_key=True),
        sa.Column("wrapped_key", sa.Text(), nullable=False),
        sa.Column("master_key_id", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False, server_default=sa.text("1")),
        sa.Column("created_at", sa.String(40), nullable=False),
    )


def downgrade() -> None:
    """Drop `audit_ref_key`: keyed refs can no longer be computed (erasure then finds only
    what is filed under plain digests)."""
    op.drop_table("audit_ref_key")
