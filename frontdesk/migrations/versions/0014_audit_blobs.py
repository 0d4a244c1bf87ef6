"""Audit blobs: large, repeated parts of payloads stored once, by content address.

Creates `audit_blob` (see `frontdesk.audit.blobs`) and converts the stored log: each
row's content fields are packed into blob references and the chains are linked again
(`_frozen_audit.repack`, this revision's own copy of the audit code), so `audit verify`
passes before and after. Encrypted rows are converted only when the master key is set
(`FRONTDESK_MASTER_KEY`) while the migration runs; without it they stay as they are, still
readable and verifiable. A conversation whose chain does not verify is left untouched.
Heads change: take external anchors again.

Revision ID: 0014_audit_blobs
Revises: 0012_jobs
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from frontdesk.migrations._frozen_audit import crypto
from frontdesk.migrations._frozen_audit.repack import repack_log, unpack_log

revision: str = "0014_audit_blobs"
down_revision: str | Sequence[str] | None = "0012_jobs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_GUARD = (
    "CREATE TRIGGER audit_event_no_update BEFORE UPDATE ON audit_event "
    "BEGIN SELECT RAISE(ABORT, 'audit_event is append-only'); END"
)


def _rewrite(convert: str) -> None:
    """Run a conversion with the append-only guard of `audit_event` lifted meanwhile."""
    bind = op.get_bind()
    provider = crypto.master_key_from_env()
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_append_only")
        op.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_link")
    else:
        op.execute("DROP TRIGGER IF EXISTS audit_event_no_update")
    (repack_log if convert == "pack" else unpack_log)(bind, provider)
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE audit_event ENABLE TRIGGER audit_event_link")
        op.execute("ALTER TABLE audit_event ENABLE TRIGGER audit_event_append_only")
    else:
        op.execute(_SQLITE_GUARD)


def upgrade() -> None:
    """Create `audit_blob` and pack the stored log into it."""
    op.create_table(
        "audit_blob",
        sa.Column("ref", sa.String(32), primary_key=True),
        sa.Column("kid", sa.String(32), nullable=True),
        sa.Column("body", sa.Text(), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE TRIGGER audit_blob_no_truncate BEFORE TRUNCATE ON audit_blob"
            " FOR EACH STATEMENT EXECUTE FUNCTION audit_no_truncate()"
        )
        # Rows are small now (references, not threads): let PostgreSQL compress a row from
        # 256 bytes on, not only from 2 kB (the default), or clear payloads grow back.
        for table in ("audit_event", "audit_blob"):
            op.execute(f"ALTER TABLE {table} SET (toast_tuple_target = 256)")
    _rewrite("pack")


def downgrade() -> None:
    """Put the blobs' values back into the rows, then drop `audit_blob`."""
    _rewrite("unpack")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE audit_event RESET (toast_tuple_target)")
    op.drop_table("audit_blob")
