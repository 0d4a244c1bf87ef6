"""Audit guard (PostgreSQL): no TRUNCATE, and heads that only the append path can move.

The row triggers of `0002_audit` do not fire on TRUNCATE, so a statement trigger now
refuses it on the three audit tables. The head row used to be moved by a plain UPDATE from
the application, so the application's role needed UPDATE on `audit_head` and could rewrite
it; now two SECURITY DEFINER functions own that path:

- `audit_lock_head(conversation_id)` creates the head if missing and returns it, locked
  for the rest of the transaction (what the appender's upsert did);
- the `audit_event_link` trigger, before each inserted row, checks that the row continues
  the chain (seq = head + 1, prev_hash = head hash) and moves the head to it.

So the role made by `frontdesk db roles` needs only SELECT and INSERT on the audit rows
and SELECT on the heads. SQLite has no roles (and no TRUNCATE): nothing changes there.

Revision ID: 0007_audit_guard
Revises: 0006_conversation_owner
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import text

revision: str = "0007_audit_guard"
down_revision: str | Sequence[str] | None = "0006_conversation_owner"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

AUDIT_TABLES = ("audit_event", "audit_head", "audit_prompt")
_GENESIS = "0" * 64


def _statements(schema: str) -> list[str]:
    # SECURITY DEFINER functions run as their owner, so their search_path is pinned to the
    # schema the tables live in (never the caller's, which could shadow the tables).
    path = f'SET search_path = "{schema}", pg_temp'
    return [
        "CREATE OR REPLACE FUNCTION audit_no_truncate() RETURNS trigger LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION '% is append-only: TRUNCATE is refused', TG_TABLE_NAME"
        " USING ERRCODE = 'insufficient_privilege'; END; $$",
        *(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}"
            " FOR EACH STATEMENT EXECUTE FUNCTION audit_no_truncate()"
            for table in AUDIT_TABLES
        ),
        "CREATE OR REPLACE FUNCTION audit_lock_head(conversation varchar)"
        " RETURNS TABLE(head_seq integer, head_hash varchar)"
        f" LANGUAGE plpgsql SECURITY DEFINER {path} AS $$ BEGIN"
        " INSERT INTO audit_head (conversation_id, seq, hash)"
        f" VALUES (conversation, 0, '{_GENESIS}') ON CONFLICT (conversation_id) DO NOTHING;"
        " RETURN QUERY SELECT h.seq, h.hash::varchar FROM audit_head h"
        " WHERE h.conversation_id = conversation FOR UPDATE;"
        " END; $$",
        "CREATE OR REPLACE FUNCTION audit_event_link() RETURNS trigger"
        f" LANGUAGE plpgsql SECURITY DEFINER {path} AS $$"
        " DECLARE last_seq integer; last_hash varchar;"
        " BEGIN"
        " SELECT h.seq, h.hash INTO last_seq, last_hash FROM audit_head h"
        " WHERE h.conversation_id = NEW.conversation_id FOR UPDATE;"
        " IF NOT FOUND THEN"
        f" last_seq := 0; last_hash := '{_GENESIS}';"
        " INSERT INTO audit_head (conversation_id, seq, hash)"
        " VALUES (NEW.conversation_id, 0, last_hash);"
        " END IF;"
        " IF NEW.seq <> last_seq + 1 OR NEW.prev_hash <> last_hash THEN"
        " RAISE EXCEPTION 'audit_event seq % of conversation % does not continue its chain"
        " (head at seq %)', NEW.seq, NEW.conversation_id, last_seq"
        " USING ERRCODE = 'integrity_constraint_violation';"
        " END IF;"
        " UPDATE audit_head SET seq = NEW.seq, hash = NEW.hash"
        " WHERE conversation_id = NEW.conversation_id;"
        " RETURN NEW;"
        " END; $$",
        "CREATE TRIGGER audit_event_link BEFORE INSERT ON audit_event"
        " FOR EACH ROW EXECUTE FUNCTION audit_event_link()",
        # Only the roles granted it (see `frontdesk db roles`) may lock heads.
        "REVOKE EXECUTE ON FUNCTION audit_lock_head(varchar) FROM PUBLIC",
    ]


def upgrade() -> None:
    """Create the TRUNCATE triggers, the head-locking function and the link trigger."""
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    schema = bind.execute(text("SELECT current_schema()")).scalar_one()
    for sql in _statements(schema):
        op.execute(sql)


def downgrade() -> None:
    """Drop them: the application then moves heads with plain UPDATEs again."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS audit_event_link ON audit_event")
    op.execute("DROP FUNCTION IF EXISTS audit_event_link()")
    op.execute("DROP FUNCTION IF EXISTS audit_lock_head(varchar)")
    for table in AUDIT_TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
    op.execute("DROP FUNCTION IF EXISTS audit_no_truncate()")
