"""A conversation's `path_version`: bumped by every write that can change an existing
path of it, so that a turn's start may reuse the path its process read last time.

A turn's start reads the path from the new message up to the newest summary's cut point
(`threads/summaries.py`). Messages are appended, never moved: the path to a given leaf
changes only when a message on it is rewritten or deleted (erasure, retention, a ruled
value's scrub, a superseded marker) or a summary is added, rewritten or removed (the cut
point moves, the summary's text is erased). Triggers bump `conversation.path_version` on
exactly those writes, whoever makes them (another process, a job, an operator's SQL), and
the start reads the column with the conversation's lock (`threads/_writes.py`), no
statement more: a cached path whose leaf and version still match is the path
(`threads/_path_cache.py`). Both databases: on SQLite a row trigger, on PostgreSQL one per
statement (a conversation bumped once however many of its rows the statement wrote).

Revision ID: 0037_path_version
Revises: 0036_later_handoff
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0037_path_version"
down_revision: str | Sequence[str] | None = "0036_later_handoff"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BUMP = "UPDATE conversation SET path_version = path_version + 1 WHERE id = {row}.conversation_id"

# (trigger, event, table, the row that names the conversation: OLD, or NEW for an insert)
_TRIGGERS = (
    ("message_path_update", "UPDATE", "message", "OLD"),
    ("message_path_delete", "DELETE", "message", "OLD"),
    ("summary_path_insert", "INSERT", "summary", "NEW"),
    ("summary_path_update", "UPDATE", "summary", "OLD"),
    ("summary_path_delete", "DELETE", "summary", "OLD"),
)

# PostgreSQL: per statement, over its transition table, so an erasure of many messages
# bumps each conversation once (one row version, not one per message).
_PG_FUNCTION = """
CREATE FUNCTION frontdesk_path_changed_{rows}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE conversation SET path_version = path_version + 1
    WHERE id IN (SELECT DISTINCT conversation_id FROM {rows}_rows);
    RETURN NULL;
END;
$$
"""


def upgrade() -> None:
    """The column (0 for every conversation) and its triggers."""
    # Plain ALTER TABLE on both databases: a batch (copy and drop) of SQLite's
    # `conversation` would cascade-delete every message with the dropped table.
    op.add_column(
        "conversation",
        sa.Column("path_version", sa.Integer(), nullable=False, server_default="0"),
    )
    postgresql = op.get_bind().dialect.name == "postgresql"
    if postgresql:
        for rows in ("old", "new"):
            op.execute(_PG_FUNCTION.format(rows=rows))
    for name, event, table, row in _TRIGGERS:
        if postgresql:
            rows = row.lower()
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} "
                f"REFERENCING {row} TABLE AS {rows}_rows "
                f"FOR EACH STATEMENT EXECUTE FUNCTION frontdesk_path_changed_{rows}()"
            )
        else:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} BEGIN {_BUMP.format(row=row)}; END"
            )


def downgrade() -> None:
    """Drop the triggers and the column."""
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name, _event, table, _row in _TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON {table}" if postgresql else f"DROP TRIGGER {name}")
    if postgresql:
        for rows in ("old", "new"):
            op.execute(f"DROP FUNCTION frontdesk_path_changed_{rows}()")
    # ALTER TABLE ... DROP COLUMN (SQLite 3.35+ too): no table copy, no cascade.
    op.execute("ALTER TABLE conversation DROP COLUMN path_version")
