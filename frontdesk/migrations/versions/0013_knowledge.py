"""Knowledge: the business's documents as versioned passages, with full-text search; and
summaries of past conversations as memories (`memory.source` `conversation_summary`).

- `knowledge_passage`: one row per passage (a section of a source), with its title, text,
  version and content hash. Full-text search is the database's own, as for `memory`:
  SQLite an FTS5 index over title and text with external content (triggers keep it in
  step); PostgreSQL a generated, weighted `tsvector` (title A, text B) with a GIN index.
- `knowledge_embedding`: vectors of an optional embeddings endpoint, by model and content
  hash (an unchanged passage is never embedded twice).
- `turn_outcome.sources`: the passages a reply was given (`Reply.sources` of a replay).
- `memory.source` may be `conversation_summary` (the column widens to 32 characters; on
  SQLite the table is rebuilt, since SQLite cannot alter a CHECK constraint, and its
  full-text index is rebuilt after it).

Revision ID: 0013_knowledge
Revises: 0015_desk
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_knowledge"
down_revision: str | Sequence[str] | None = "0015_desk"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD_SOURCES = ("memory_expert", "handler", "user", "operator")
_NEW_SOURCES = (*_OLD_SOURCES, "conversation_summary")

_KNOWLEDGE_FTS = [
    "CREATE VIRTUAL TABLE knowledge_fts USING fts5(title, text, content='knowledge_passage',"
    " content_rowid='seq', tokenize='porter unicode61')",
    "CREATE TRIGGER knowledge_fts_insert AFTER INSERT ON knowledge_passage BEGIN"
    " INSERT INTO knowledge_fts(rowid, title, text) VALUES (new.seq, new.title, new.text); END",
    "CREATE TRIGGER knowledge_fts_delete AFTER DELETE ON knowledge_passage BEGIN"
    " INSERT INTO knowledge_fts(knowledge_fts, rowid, title, text)"
    " VALUES ('delete', old.seq, old.title, old.text); END",
    "CREATE TRIGGER knowledge_fts_update AFTER UPDATE OF title, text ON knowledge_passage BEGIN"
    " INSERT INTO knowledge_fts(knowledge_fts, rowid, title, text)"
    " VALUES ('delete', old.seq, old.title, old.text);"
    " INSERT INTO knowledge_fts(rowid, title, text) VALUES (new.seq, new.title, new.text); END",
]

_MEMORY_TRIGGERS = [
    "CREATE TRIGGER memory_fts_insert AFTER INSERT ON memory BEGIN"
    " INSERT INTO memory_fts(rowid, text) VALUES (new.seq, new.text); END",
    "CREATE TRIGGER memory_fts_delete AFTER DELETE ON memory BEGIN"
    " INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.seq, old.text); END",
    "CREATE TRIGGER memory_fts_update AFTER UPDATE OF text ON memory BEGIN"
    " INSERT INTO memory_fts(memory_fts, rowid, text) VALUES ('delete', old.seq, old.text);"
    " INSERT INTO memory_fts(rowid, text) VALUES (new.seq, new.text); END",
]
_MEMORY_COLUMNS = (
    "seq, id, user_id, text, key, source, conversation_id, message_id, created_at,"
    " updated_at, superseded_by"
)


def _check(sources: Sequence[str]) -> str:
    return "source IN (" + ", ".join(f"'{s}'" for s in sources) + ")"


def _memory_sources(sources: Sequence[str], width: int) -> None:
    """Let `memory.source` hold exactly `sources` (at most `width` characters)."""
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("ck_memory_source", "memory", type_="check")
        op.alter_column("memory", "source", type_=sa.String(width))
        op.create_check_constraint("ck_memory_source", "memory", _check(sources))
        return
    # SQLite cannot alter a CHECK constraint: rebuild the table, keeping each row's `seq`
    # (the full-text index's rowid), then rebuild the index from the rows.
    for trigger in ("memory_fts_insert", "memory_fts_delete", "memory_fts_update"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    op.create_table(
        "memory_rebuilt",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=True),
        sa.Column("source", sa.String(length=width), nullable=False),
        sa.Column("conversation_id", sa.String(length=255), nullable=True),
        sa.Column("message_id", sa.String(length=36), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("superseded_by", sa.String(length=36), nullable=True),
        sa.UniqueConstraint("id", name="uq_memory_id"),
        sa.CheckConstraint(_check(sources), name="ck_memory_source"),
    )
    op.execute(
        f"INSERT INTO memory_rebuilt ({_MEMORY_COLUMNS}) SELECT {_MEMORY_COLUMNS} FROM memory"
    )
    op.drop_index("ix_memory_user_key", table_name="memory")
    op.drop_index("ix_memory_user_current", table_name="memory")
    op.drop_table("memory")
    op.rename_table("memory_rebuilt", "memory")
    op.create_index("ix_memory_user_current", "memory", ["user_id", "superseded_by", "updated_at"])
    op.create_index("ix_memory_user_key", "memory", ["user_id", "key"])
    for sql in _MEMORY_TRIGGERS:
        op.execute(sql)
    op.execute("INSERT INTO memory_fts(memory_fts) VALUES ('rebuild')")


def upgrade() -> None:
    """Create the knowledge tables and their index; allow `conversation_summary` memories."""
    op.create_table(
        "knowledge_passage",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("id", name="uq_knowledge_passage_id"),
    )
    op.create_index("ix_knowledge_passage_source", "knowledge_passage", ["source", "position"])
    op.create_table(
        "knowledge_embedding",
        sa.Column("model", sa.String(length=255), primary_key=True),
        sa.Column("sha256", sa.String(length=64), primary_key=True),
        sa.Column("dimensions", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "ALTER TABLE knowledge_passage ADD COLUMN tsv tsvector GENERATED ALWAYS AS"
            " (setweight(to_tsvector('english', title), 'A')"
            " || setweight(to_tsvector('english', text), 'B')) STORED"
        )
        op.execute("CREATE INDEX ix_knowledge_passage_tsv ON knowledge_passage USING gin (tsv)")
    else:
        for sql in _KNOWLEDGE_FTS:
            op.execute(sql)
    _memory_sources(_NEW_SOURCES, 32)
    op.add_column("turn_outcome", sa.Column("sources", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop the knowledge tables (every passage is lost) and the conversation summaries."""
    with op.batch_alter_table("turn_outcome") as batch:
        batch.drop_column("sources")
    op.execute("DELETE FROM memory WHERE source = 'conversation_summary'")
    _memory_sources(_OLD_SOURCES, 16)
    if op.get_bind().dialect.name != "postgresql":
        for trigger in ("knowledge_fts_insert", "knowledge_fts_delete", "knowledge_fts_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        op.execute("DROP TABLE IF EXISTS knowledge_fts")
    op.drop_table("knowledge_embedding")
    op.drop_index("ix_knowledge_passage_source", table_name="knowledge_passage")
    op.drop_table("knowledge_passage")
