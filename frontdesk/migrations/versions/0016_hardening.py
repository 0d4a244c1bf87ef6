"""The turn outcome's own flags as columns: `handoff` (the reason a person takes over, set
by triage's HUMAN route or a handler's `Outcome(handoff=...)`) and `handler_failed`.

Before this revision the library wrote them into `data` (`{"handoff": true, "reason": ...}`,
`{"error": "handler_failed"}`), the handler's own field; rows stored so are moved across.

Revision ID: 0016_hardening
Revises: 0013_knowledge
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_hardening"
down_revision: str | Sequence[str] | None = "0013_knowledge"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_out = sa.table(
    "turn_outcome",
    sa.column("user_message_id", sa.String),
    sa.column("data", sa.JSON),
    sa.column("handoff", sa.Text),
    sa.column("handler_failed", sa.Boolean),
)


def upgrade() -> None:
    """Add the two columns; move the flags stored in `data` by older code into them."""
    with op.batch_alter_table("turn_outcome") as batch:
        batch.add_column(sa.Column("handoff", sa.Text(), nullable=True))
        batch.add_column(
            sa.Column("handler_failed", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    conn = op.get_bind()
    for row in conn.execute(sa.select(_out.c.user_message_id, _out.c.data)).mappings():
        data = dict(row["data"] or {})
        handoff = (
            str(data.pop("reason", "routed to a person")) if data.pop("handoff", None) else None
        )
        failed = data.get("error") == "handler_failed"
        if failed:
            data.pop("error")
        if handoff is not None or failed:
            conn.execute(
                sa.update(_out)
                .where(_out.c.user_message_id == row["user_message_id"])
                .values(data=data, handoff=handoff, handler_failed=failed)
            )


def downgrade() -> None:
    """Put the flags back into `data`, then drop the columns."""
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(_out.c.user_message_id, _out.c.data, _out.c.handoff, _out.c.handler_failed)
    ).mappings()
    for row in list(rows):
        data = dict(row["data"] or {})
        if row["handoff"] is not None:
            data.update(handoff=True, reason=row["handoff"])
        if row["handler_failed"]:
            data["error"] = "handler_failed"
        if row["handoff"] is not None or row["handler_failed"]:
            conn.execute(
                sa.update(_out)
                .where(_out.c.user_message_id == row["user_message_id"])
                .values(data=data)
            )
    with op.batch_alter_table("turn_outcome") as batch:
        batch.drop_column("handler_failed")
        batch.drop_column("handoff")
