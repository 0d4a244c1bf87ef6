"""Audit: the hash-chained event rows, each conversation's head, and system prompt texts.

`audit_event` is append-only: a trigger rejects UPDATE and DELETE (on SQLite and
PostgreSQL), so the application's own connection cannot rewrite history.

Revision ID: 0002_audit
Revises: 0001_threads
Create Date: 2025-01-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_audit"
down_revision: str | Sequence[str] | None = "0001_threads"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_TRIGGERS = (
    "CREATE TRIGGER audit_event_no_update BEFORE UPDATE ON audit_event "
    "BEGIN SELECT RAISE(ABORT, 'audit_event is append-only'); END",
    "CREATE TRIGGER audit_event_no_delete BEFORE DELETE ON audit_event "
    "BEGIN SELECT RAISE(ABORT, 'audit_event is append-only'); END",
)
_POSTGRESQL_TRIGGERS = (
    "CREATE OR REPLACE FUNCTION audit_event_append_only() RETURNS trigger AS $$ "
    "BEGIN RAISE EXCEPTION 'audit_event is append-only'; END; $$ LANGUAGE plpgsql",
    "CREATE TRIGGER audit_event_append_only BEFORE UPDATE OR DELETE ON audit_event "
    "FOR EACH ROW EXECUTE FUNCTION audit_event_append_only()",
)


def upgrade() -> None:
    """Create the audit tables and the append-only trigger."""
    op.create_table(
        "audit_event",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("conversation_id", sa.String(255), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("event_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("turn_id", sa.String(255), nullable=False),
        sa.Column("created_at", sa.String(40), nullable=False),
        sa.Column("payload_json", sa.Text(), nullable=False),
        sa.Column("prompt_sha256", sa.String(64), nullable=True),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.UniqueConstraint("conversation_id", "seq", name="uq_audit_event_conversation_seq"),
        sa.UniqueConstraint("event_id", name="uq_audit_event_event_id"),
    )
    op.create_index("ix_audit_event_turn", "audit_event", ["conversation_id", "turn_id"])
    op.create_table(
        "audit_head",
        sa.Column("conversation_id", sa.String(255), primary_key=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
    )
    op.create_table(
        "audit_prompt",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("text_json", sa.Text(), nullable=False),
    )
    dialect = op.get_bind().dialect.name
    for sql in _SQLITE_TRIGGERS if dialect == "sqlite" else _POSTGRESQL_TRIGGERS:
        op.execute(sql)


def downgrade() -> None:
    """Drop the audit tables (and with them the trigger)."""
    op.drop_table("audit_prompt")
    op.drop_table("audit_head")
    op.drop_index("ix_audit_event_turn", table_name="audit_event")
    op.drop_table("audit_event")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS audit_event_append_only()")
