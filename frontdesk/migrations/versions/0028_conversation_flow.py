"""A turn's place in the conversation: its request in progress, its categories, its language.

`turn_outcome.flow` (JSON, NULL for a turn with nothing to carry): what this turn decided
about the conversation besides its one category (`orchestrator/pending.py`,
`orchestrator/multi_intent.py`), and what the next turn needs from it:

- `pending`: the request in progress (its category, the fields known so far, what is
  missing, when it was started, whether the bot offered to resume it after a digression);
- `clarify`: the categories the reply asked the customer to choose between;
- `categories`, `steps`: the categories of a message with several requests, and each one's
  own outcome after the first (whose outcome is the turn's own columns);
- `cancelled`, `language`, `how`: the cancellation, the message's language and how it was
  routed (`triage`, `pending`, `resume`, `clarify`, `cancel`).

The next turn's start reads it with the category of the turn before (the same primary-key
read as `turn_outcome.confirmation`), so a plain turn pays nothing for it.

Revision ID: 0028_conversation_flow
Revises: 0027_ruled_values
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028_conversation_flow"
down_revision: str | Sequence[str] | None = "0027_ruled_values"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Add `turn_outcome.flow`."""
    with op.batch_alter_table("turn_outcome") as batch:
        batch.add_column(sa.Column("flow", sa.JSON(), nullable=True))


def downgrade() -> None:
    """Drop `turn_outcome.flow`."""
    with op.batch_alter_table("turn_outcome") as batch:
        batch.drop_column("flow")
