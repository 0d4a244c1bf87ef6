"""Handler state scopes: each handler value belongs to a conversation, a user, or everyone.

`handler_data` was keyed by (namespace, key) alone, so every conversation of every user saw
the same values. This revision adds `scope` (`conversation`, `user` or `everyone`) and
`scope_id` (the conversation id, the user id, or `''` for everyone) and makes them part of
the primary key: (namespace, scope, scope_id, key). Rows stored before it keep their values
and become the `everyone` scope, which is what `HandlerContext.store` has always been. An
index on (scope, scope_id) serves erasure (every value in one user's scope).

PostgreSQL alters the table in place (keeping the grants `frontdesk db roles` made);
SQLite, which cannot change a primary key, fills a new table and renames it.

Revision ID: 0009_handler_scopes
Revises: 0007_audit_guard
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_handler_scopes"
down_revision: str | Sequence[str] | None = "0008_memory"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PK = "handler_data_pkey"  # PostgreSQL's name for the primary key `0001_threads` made.
_SCOPES = "scope IN ('conversation', 'user', 'everyone')"
_COPY = "handler_data_copy"


def upgrade() -> None:
    """Add `scope` and `scope_id` (existing rows: `everyone`, `''`) to the primary key."""
    if op.get_bind().dialect.name == "postgresql":
        op.add_column(
            "handler_data",
            sa.Column("scope", sa.String(16), nullable=False, server_default="everyone"),
        )
        op.add_column(
            "handler_data",
            sa.Column("scope_id", sa.String(255), nullable=False, server_default=""),
        )
        op.drop_constraint(_PK, "handler_data", type_="primary")
        op.create_primary_key(_PK, "handler_data", ["namespace", "scope", "scope_id", "key"])
        op.create_check_constraint("ck_handler_data_scope", "handler_data", _SCOPES)
    else:
        _create_copy(scoped=True)
        op.execute(
            f"INSERT INTO {_COPY} (namespace, scope, scope_id, key, value, updated_at)"
            " SELECT namespace, 'everyone', '', key, value, updated_at FROM handler_data"
        )
        op.drop_table("handler_data")
        op.rename_table(_COPY, "handler_data")
    op.create_index("ix_handler_data_scope", "handler_data", ["scope", "scope_id"])


def downgrade() -> None:
    """Keep only the `everyone` rows (the others have no place in the old key) and drop the
    scope columns."""
    op.drop_index("ix_handler_data_scope", table_name="handler_data")
    op.execute("DELETE FROM handler_data WHERE scope <> 'everyone'")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("ck_handler_data_scope", "handler_data", type_="check")
        op.drop_constraint(_PK, "handler_data", type_="primary")
        op.create_primary_key(_PK, "handler_data", ["namespace", "key"])
        op.drop_column("handler_data", "scope_id")
        op.drop_column("handler_data", "scope")
    else:
        _create_copy(scoped=False)
        op.execute(
            f"INSERT INTO {_COPY} (namespace, key, value, updated_at)"
            " SELECT namespace, key, value, updated_at FROM handler_data"
        )
        op.drop_table("handler_data")
        op.rename_table(_COPY, "handler_data")


def _create_copy(*, scoped: bool) -> None:
    """SQLite cannot change a table's primary key: the new table is made and filled."""
    key = ["namespace", "scope", "scope_id", "key"] if scoped else ["namespace", "key"]
    scope = [
        sa.Column("scope", sa.String(16), nullable=False, server_default="everyone"),
        sa.Column("scope_id", sa.String(255), nullable=False, server_default=""),
        sa.CheckConstraint(_SCOPES, name="ck_handler_data_scope"),
    ]
    op.create_table(
        _COPY,
        sa.Column("namespace", sa.String(255), nullable=False),
        *(scope if scoped else []),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("value", sa.JSON(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(*key, name=_PK),
    )
