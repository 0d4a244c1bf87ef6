"""A warm turn's start and finish as one call each (PostgreSQL): `frontdesk_start_turn`,
`frontdesk_finish_turn`.

A turn's first transaction on PostgreSQL was twelve round trips (BEGIN, eight statements,
a savepoint around the knowledge lookup, COMMIT), each mostly client CPU. This function
runs the same work for the usual turn inside the server, in one statement the client
sends alone (autocommit: no BEGIN or COMMIT to wait for):

- take the conversation's lease (the fencing token returned; no row at all when another
  owner holds it unexpired, and nothing written);
- lock the conversation row and insert the user message under its active leaf, as the new
  leaf;
- return the path from the newest summary's cut point to the new message, with the turn
  before on that path and its stored category, confirmation and flow (a request in
  progress).

`frontdesk_finish_turn` is the last transaction of such a turn: behind the lease's fence
(given back in the same statement; `false` and nothing written when it was lost), the
outcome's usage, the reply as the new leaf, and the turn's audit batch, chained by the
client from the head of the conversation's last batch it saw committed and written only
when that is still the head (`audit_lock_head`, the link trigger checking each row).

Anything unusual (a new conversation, another owner or profile, a client message id seen
before, an unanswered user message at the leaf, an open hand-off; a failed-turn marker under the
question, an audit head another writer moved) raises SQLSTATE `FD001`
before the call ends, so nothing of it is kept, and the store runs its general start
(`threads/store.py`), the one that knows what to do then. SQLite has no functions:
nothing changes there.

Revision ID: 0031_turn_functions
Revises: 0030_profile_data
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0031_turn_functions"
down_revision: str | Sequence[str] | None = "0030_profile_data"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FALLBACK = "FD001"
"""The SQLSTATE of "not the usual turn: run the general path" (nothing was written)."""

_START = f"""
CREATE OR REPLACE FUNCTION frontdesk_start_turn(
    lease_name varchar, lease_owner varchar, lease_expires double precision,
    lease_now double precision, new_id varchar, conv_id varchar, new_content text,
    new_created_at timestamptz, new_token_count integer, new_client_id varchar,
    caller varchar, caller_profile varchar, check_handoff boolean
) RETURNS TABLE (
    m message, s summary, lease_token bigint, previous_id varchar,
    previous_category varchar, previous_confirmation json, previous_flow json
) LANGUAGE plpgsql AS $$
DECLARE
    taken bigint;
    leaf varchar;
    owner_id varchar;
    recorded varchar;
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
    SELECT c.active_leaf_id, c.user_id, c.profile INTO leaf, owner_id, recorded
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
    SELECT row_m, row_s, taken, previous.id, o.category, o.confirmation, o.flow
    FROM walk
        JOIN message row_m ON row_m.id = walk.id
        LEFT JOIN summary row_s ON row_s.id = walk.cut
        LEFT JOIN previous ON true
        LEFT JOIN turn_outcome o ON o.user_message_id = previous.id
    ORDER BY walk.depth DESC;
END;
$$
"""

_FINISH = f"""
CREATE OR REPLACE FUNCTION frontdesk_finish_turn(
    lease_name varchar, lease_owner varchar, lease_token bigint, outcome json, reply json,
    audit_conversation varchar, audit_seq integer, audit_hash varchar,
    blob_refs varchar[], blob_kids varchar[], blob_bodies bytea[],
    event_seqs integer[], event_ids bytea[], event_kinds varchar[], event_turns bytea[],
    event_times bytea[], event_payloads bytea[], event_prompts bytea[], event_hashes bytea[]
) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    answered message;
    head_seq_now integer;
    head_hash_now varchar;
BEGIN
    -- The fence, given back in the same statement: only while the lease holds.
    UPDATE lease SET expires_at = 0
    WHERE name = lease_name AND owner = lease_owner AND token = lease_token
        AND expires_at > 0;
    IF NOT FOUND THEN
        RETURN false;  -- Lost: nothing written.
    END IF;
    answered := json_populate_record(NULL::message, reply);
    IF EXISTS (
        SELECT 1 FROM message x
        WHERE x.parent_id = answered.parent_id AND x.role = 'assistant' AND x.kind = 'failed'
    ) THEN
        RAISE EXCEPTION 'a failed-turn marker to supersede' USING ERRCODE = '{FALLBACK}';
    END IF;
    IF audit_conversation IS NOT NULL THEN
        SELECT h.head_seq, h.head_hash INTO head_seq_now, head_hash_now
        FROM audit_lock_head(audit_conversation) h;
        IF head_seq_now <> audit_seq OR head_hash_now <> audit_hash THEN
            RAISE EXCEPTION 'the audit head moved' USING ERRCODE = '{FALLBACK}';
        END IF;
    END IF;
    IF outcome IS NOT NULL THEN
        INSERT INTO turn_outcome AS o
        SELECT * FROM json_populate_record(NULL::turn_outcome, outcome)
        ON CONFLICT (user_message_id) DO UPDATE SET usage = excluded.usage,
            models = excluded.models, sources = excluded.sources, flow = excluded.flow;
    END IF;
    INSERT INTO message SELECT (answered).*;
    UPDATE conversation SET active_leaf_id = answered.id WHERE id = answered.conversation_id;
    IF audit_conversation IS NOT NULL THEN
        INSERT INTO audit_blob (ref, kid, body)
        SELECT * FROM unnest(blob_refs, blob_kids, blob_bodies)
        ON CONFLICT DO NOTHING;
        FOR i IN 1 .. coalesce(array_length(event_seqs, 1), 0) LOOP
            INSERT INTO audit_event (conversation_id, seq, event_id, kind, turn_id,
                                     created_at, payload_json, prompt_sha256, hash)
            VALUES (audit_conversation, event_seqs[i], event_ids[i], event_kinds[i],
                    event_turns[i], event_times[i], event_payloads[i], event_prompts[i],
                    event_hashes[i]);
        END LOOP;
    END IF;
    RETURN true;
END;
$$
"""


def upgrade() -> None:
    """Create the turn's functions (PostgreSQL only)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_START)
    op.execute(_FINISH)


def downgrade() -> None:
    """Drop them: every turn runs the general path again."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS frontdesk_start_turn")
    op.execute("DROP FUNCTION IF EXISTS frontdesk_finish_turn")
