"""Memories and knowledge documents belong to a profile (the business that keeps them).

- `memory.profile`: the profile whose turns recall the fact. Two profiles of one deployment
  that share a user id (a bank's cards and loans desks) never see each other's facts; an
  erasure and an export still cover the user across every profile (docs/privacy.md).
- `knowledge_passage.profile`: the library a passage belongs to (`Profile.knowledge_source`,
  by default the profile's own name); a source name is one profile's.

Rows stored before: a fact written in a conversation takes the profile that conversation
recorded (revision `0022_profile`); every other row, and a fact of a conversation from
before profiles, the default profile (`default`: the name of an orchestrator's one
profile). Indexes: the lookups of a turn filter by user and profile, a library's passages
by profile and source.

Revision ID: 0030_profile_data
Revises: 0027_ruled_values
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0030_profile_data"
down_revision: str | Sequence[str] | None = "0027_ruled_values"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DEFAULT_PROFILE = "default"
"""The name of an orchestrator's one profile (`frontdesk.orchestrator.profile`), copied:
a migration never imports live code."""


def upgrade() -> None:
    """Add the two columns (a constant default: no table rewrite on PostgreSQL, a plain
    `ALTER TABLE` on SQLite), backfill the facts of conversations that recorded a profile,
    and re-index."""
    for table in ("memory", "knowledge_passage"):
        op.execute(
            f"ALTER TABLE {table} ADD COLUMN profile VARCHAR(64) NOT NULL"
            f" DEFAULT '{DEFAULT_PROFILE}'"
        )
    op.execute(
        "UPDATE memory SET profile = (SELECT c.profile FROM conversation c"
        " WHERE c.id = memory.conversation_id)"
        " WHERE conversation_id IS NOT NULL AND EXISTS (SELECT 1 FROM conversation c"
        " WHERE c.id = memory.conversation_id AND c.profile IS NOT NULL)"
    )
    op.drop_index("ix_memory_user_current", table_name="memory")
    op.create_index(
        "ix_memory_user_current", "memory", ["user_id", "profile", "superseded_by", "updated_at"]
    )
    op.drop_index("ix_knowledge_passage_source", table_name="knowledge_passage")
    op.create_index(
        "ix_knowledge_passage_source", "knowledge_passage", ["profile", "source", "position"]
    )


def downgrade() -> None:
    """Drop the two columns (every profile again shares the facts and the documents)."""
    op.drop_index("ix_knowledge_passage_source", table_name="knowledge_passage")
    op.create_index("ix_knowledge_passage_source", "knowledge_passage", ["source", "position"])
    op.drop_index("ix_memory_user_current", table_name="memory")
    op.create_index("ix_memory_user_current", "memory", ["user_id", "superseded_by", "updated_at"])
    for table in ("memory", "knowledge_passage"):
        op.execute(f"ALTER TABLE {table} DROP COLUMN profile")
