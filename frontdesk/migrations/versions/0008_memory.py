"""Memory: facts kept about a user across conversations, with full-text search.

One row per fact (`memory`); `superseded_by` is set when a newer fact with the same key
replaced it (current facts have it NULL). Forgetting deletes the row. Full-text search is
the database's own:

- SQLite: an FTS5 index over `memory.text` with external content (`content='memory'`), so
  the text is stored once, in `memory`; triggers keep the index in step, deleting a row's
  terms when the row is deleted.
- PostgreSQL: a generated `tsvector` column over the text, with a GIN index.

Revision ID: 0008_memory
Revises: 0007_audit_guard
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_memory"
down_revision: str | Sequence[str] | None = "0007_audit_guard"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_FTS = [
    "CREATE VIRTUAL TABLE memory_fts USING fts5("
    "text, content='memory', content_rowid='seq', tokenize='porter unicode61')",
    "CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory BEGIN"
    " INSERT INTO memory_fts(rowid, text) VALUES (new.seq, new.text); END",
    "CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory BEGIN"
    " INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.seq, old.text); END",
    "CREATE TRIGGER memory_fts_update AFTER UPDATE OF text ON memory BEGIN"
    " INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.seq, old.text);"
    " INSERT INTO memory_fts(rowid, text) VALUES (new.seq, new.text); END",
]


def upgrade() -> None:
    """Create the `memory` table and its full-text index."""
    op.create_table(
        "memory",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=True),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("conversation_id", sa.String(length=255), nullable=True),
        sa.Column("message_id", sa.String(length=36), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("superseded_by", sa.String(length=36), nullable=True),
        sa.UniqueConstraint("id", name="uq_memory_id"),
        sa.CheckConstraint(
            "source IN ('memory_expert', 'handler', 'user', 'operator')", name="ck_memory_source"
        ),
    )
    op.create_index("ix_memory_user_current", "memory", ["user_id", "superseded_by", "updated_at"])
    op.create_index("ix_memory_user_key", "memory", ["user_id", "key"])
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE memory ADD COLUMN tsv tsvector"
            " GENERATED ALWAYS AS (to_tsvector('english', text)) STORED"
        )
        op.execute("CREATE INDEX ix_memory_tsv ON memory USING gin (tsv)")
    else:
        for sql in _SQLITE_FTS:
            op.execute(sql)


def downgrade() -> None:
    """Drop the index and the table (every fact is lost)."""
    if op.get_bind().dialect.name != "postgresql":
        for trigger in ("memory_fts_insert", "memory_fts_delete", "memory_fts_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS memory_fts")
    op.drop_index("ix_memory_user_key", table_name="memory")
    op.drop_index("ix_memory_user_current", table_name="memory")
    op.drop_table("memory")
