"""A warm turn's start on PostgreSQL reads no path its caller already holds:
`frontdesk_start_turn` again (revision 0031), told the path its process kept.

The function walked the path from the new message up to the newest summary's cut point
on every turn, and sent every message of it back, though the path had only grown by the
two messages that process wrote itself: the turn before's question and reply. SQLite's
start reuses such a path (`threads/_path_cache.py`) while the conversation's
`path_version` (revision 0037, bumped by every write that can change an existing path) is
the one it was read at. The function now takes the same proof: the leaf and version of
the path its caller kept, and that path's last user message. When the conversation's leaf
and version are still those, it returns the new message alone, with the outcome of that
turn before (`path_known`); otherwise it walks as before. Either way it returns the
version it read under the conversation's lock, so the caller keeps the path it ends with.
The refusals (SQLSTATE `FD001`: not the usual start, nothing kept) are unchanged. It is a
second function of the name (sixteen arguments): revision 0031's stays for processes that
still run the code before this one during a rolling upgrade.

Revision ID: 0038_start_known_path
Revises: 0037_path_version
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0038_start_known_path"
down_revision: str | Sequence[str] | None = "0037_path_version"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FALLBACK = "FD001"
"""The SQLSTATE of "not the usual turn: run the general path" (nothing was written)."""

_ARGUMENTS = (
    "varchar, varchar, double precision, double precision, varchar, varchar, text, "
    "timestamptz, integer, varchar, varchar, varchar, boolean, varchar, integer, varchar"
)
"""The new start's argument types (revision 0031's thirteen, then the known path's three)."""

_START = f"""
CREATE FUNCTION frontdesk_start_turn(
    lease_name varchar, lease_owner varchar, lease_expires double precision,
    lease_now double precision, new_id varchar, conv_id varchar, new_content text,
    new_created_at timestamptz, new_token_count integer, new_client_id varchar,
    caller varchar, caller_profile varchar, check_handoff boolean,
    known_leaf varchar, known_version integer, known_previous varchar
) RETURNS TABLE (
    m message, s summary, lease_token bigint, previous_id varchar,
    previous_category varchar, previous_confirmation json, previous_flow json,
    path_version integer, path_known boolean
) LANGUAGE plpgsql AS $$
DECLARE
    taken bigint;
    leaf varchar;
    owner_id varchar;
    recorded varchar;
    leaf_version integer;
BEGIN
    INSERT INTO lease AS l (name, owner, expires_at, token)
    VALUES (lease_name, lease_owner, lease_expires, 1)
    ON CONFLICT (name) DO UPDATE SET owner = excluded.owner,
        expires_at = excluded.expires_at,
        token = CASE WHEN l.owner = excluded.owner THEN l.token ELSE l.token + 1 END
    WHERE l.expires_at < lease_now OR l.owner = lease_owner
    RETURNING l.token INTO taken;
    IF taken IS NULL THEN
        RETURN;  -- Another owner holds the lease: no row, nothing written.
    END IF;
    SELECT c.active_leaf_id, c.user_id, c.profile, c.path_version
    INTO leaf, owner_id, recorded, leaf_version
    FROM conversation c WHERE c.id = conv_id FOR NO KEY UPDATE;
    IF NOT FOUND
        OR owner_id IS DISTINCT FROM caller
        OR (caller_profile IS NOT NULL AND recorded IS NOT NULL AND recorded <> caller_profile)
        OR (new_client_id IS NOT NULL AND EXISTS (
            SELECT 1 FROM message x
            WHERE x.conversation_id = conv_id AND x.client_message_id = new_client_id))
        OR EXISTS (SELECT 1 FROM message x WHERE x.id = leaf AND x.role = 'user')
        OR (check_handoff AND EXISTS (
            SELECT 1 FROM handoff h
            WHERE h.conversation_id = conv_id AND h.closed_at IS NULL))
    THEN
        RAISE EXCEPTION 'not a usual turn start' USING ERRCODE = '{FALLBACK}';
    END IF;
    INSERT INTO message (id, conversation_id, parent_id, role, content, created_at,
                         token_count, client_message_id, model, prompt_versions, kind, author)
    VALUES (new_id, conv_id, leaf, 'user', new_content, new_created_at,
            new_token_count, new_client_id, NULL, NULL, 'message', 'user');
    UPDATE conversation SET active_leaf_id = new_id WHERE id = conv_id;
    IF leaf = known_leaf AND leaf_version = known_version THEN
        -- The caller holds the path to the old leaf, unchanged since: the new message
        -- alone, with the outcome of the turn before (the caller's last user message).
        RETURN QUERY
        SELECT row_m, NULL::summary, taken, known_previous, o.category, o.confirmation,
               o.flow, leaf_version, true
        FROM message row_m LEFT JOIN turn_outcome o ON o.user_message_id = known_previous
        WHERE row_m.id = new_id;
        RETURN;
    END IF;
    RETURN QUERY
    WITH RECURSIVE walk(id, parent_id, depth, cut) AS (
        SELECT w.id, w.parent_id, 0, here.id
        FROM message w LEFT JOIN summary here
            ON here.conversation_id = w.conversation_id AND here.covers_until_message_id = w.id
        WHERE w.id = new_id
        UNION ALL
        SELECT up.id, up.parent_id, walk.depth + 1, there.id
        FROM walk JOIN message up ON up.id = walk.parent_id
            LEFT JOIN summary there
            ON there.conversation_id = up.conversation_id
            AND there.covers_until_message_id = up.id
        WHERE walk.cut IS NULL
    ), previous AS (
        SELECT walk.id FROM walk JOIN message p ON p.id = walk.id
        WHERE walk.depth > 0 AND walk.cut IS NULL AND p.role = 'user'
        ORDER BY walk.depth LIMIT 1
    )
    SELECT row_m, row_s, taken, previous.id, o.category, o.confirmation, o.flow,
           leaf_version, false
    FROM walk
        JOIN message row_m ON row_m.id = walk.id
        LEFT JOIN summary row_s ON row_s.id = walk.cut
        LEFT JOIN previous ON true
        LEFT JOIN turn_outcome o ON o.user_message_id = previous.id
    ORDER BY walk.depth DESC;
END;
$$
"""


def upgrade() -> None:
    """The start told the path its caller holds, beside revision 0031's (PostgreSQL only):
    a process still running the code before this revision (a rolling upgrade) keeps
    calling the start it knows, whose thirteen arguments name it apart."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_START)


def downgrade() -> None:
    """Drop it: revision 0031's start is the one left."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"DROP FUNCTION frontdesk_start_turn({_ARGUMENTS})")
