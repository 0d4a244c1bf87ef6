"""Memory trust: whose word each remembered fact is.

`memory.trust` is `customer` (the customer said it: the memory expert's facts, the
summaries of their past conversations, what an application passed on as theirs) or
`verified` (the business wrote it: a handler, an operator). Experts are sent the two in
separate blocks (docs/memory.md), so a customer's claim never passes for the bank's record.

Rows stored before: `memory_expert`, `conversation_summary` and `user` become `customer`;
`handler` and `operator` become `verified`. A row written without a trust is `customer`
(the server default): the safe side.

Revision ID: 0023_memory_trust
Revises: 0022_profile
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0023_memory_trust"
down_revision: str | Sequence[str] | None = "0022_profile"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `memory.trust` and give every stored fact its trust by its source."""
    # One statement on both databases (SQLite allows a CHECK in ADD COLUMN; PostgreSQL
    # adds a column with a constant default without rewriting the table).
    op.execute(
        "ALTER TABLE memory ADD COLUMN trust VARCHAR(16) NOT NULL DEFAULT 'customer'"
        " CONSTRAINT ck_memory_trust CHECK (trust IN ('customer', 'verified'))"
    )
    op.execute("UPDATE memory SET trust = 'verified' WHERE source IN ('handler', 'operator')")


def downgrade() -> None:
    """Drop `memory.trust` (every fact is again sent as one kind)."""
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE memory DROP CONSTRAINT ck_memory_trust")
    op.execute("ALTER TABLE memory DROP COLUMN trust")
