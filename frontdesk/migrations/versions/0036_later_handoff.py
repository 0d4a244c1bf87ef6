"""A turn's finish on PostgreSQL keeps a later request's hand-off: `frontdesk_finish_turn`
again (revision 0031), its outcome's re-save as the store's own (`threads/_outcomes.py`).

A message with several requests stores its outcome after each handler, and a later one
may hand off after the first was stored. The store's re-save keeps that hand-off when the
stored outcome had none (and opens it, audited, in the same transaction). The function
cannot open a hand-off, so it now refuses an outcome that carries one (SQLSTATE `FD001`:
nothing kept, the store runs its general finish, which opens it), and its re-save keeps a
stored hand-off as the store's does. The store sends it no such outcome; the refusal makes
sure no caller's hand-off is ever dropped here. SQLite has no functions: nothing changes
there.

Revision ID: 0036_later_handoff
Revises: 0035_memory_newest
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0036_later_handoff"
down_revision: str | Sequence[str] | None = "0035_memory_newest"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FALLBACK = "FD001"
"""The SQLSTATE of "not the usual turn: run the general path" (nothing was written)."""

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
    IF outcome IS NOT NULL AND outcome ->> 'handoff' IS NOT NULL THEN
        -- A hand-off opens with its outcome, audited: only the general finish does that.
        RAISE EXCEPTION 'an outcome that hands off' USING ERRCODE = '{FALLBACK}';
    END IF;
    IF outcome IS NOT NULL THEN
        INSERT INTO turn_outcome AS o
        SELECT * FROM json_populate_record(NULL::turn_outcome, outcome)
        ON CONFLICT (user_message_id) DO UPDATE SET usage = excluded.usage,
            models = excluded.models, sources = excluded.sources, flow = excluded.flow,
            handoff = coalesce(o.handoff, excluded.handoff);
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

# Revision 0031's, as it was written (the downgrade restores it).
_FINISH_0031 = f"""
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
    """The finish refuses an outcome that hands off and keeps a stored hand-off
    (PostgreSQL only)."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_FINISH)


def downgrade() -> None:
    """The finish as revision 0031 wrote it."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_FINISH_0031)
