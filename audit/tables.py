"""The audit tables: events (the chain), heads (where each chain ends), prompt texts, blobs.

The Alembic revision `0002_audit` creates them (with the trigger that makes
`audit_event` append-only); these definitions are what the queries are built from.
`audit_event.payload_json` and `audit_blob.body` hold their texts in the stored form of
`audit.compact` (deflated bytes; `bytea` on PostgreSQL since migration `0017_audit_compact`).
Since `0020_audit_narrow` a row's `hash` (and a head's) is its 32 raw bytes, its ids and
prompt digest are the bytes their hex spells (`store.id_bytes`), its timestamp 8 bytes
(`store.time_bytes`), and it does not store `prev_hash`: that is the hash of the row before
it in `(conversation_id, seq)` order (`audit.chain.GENESIS_HASH` for the first). The texts
the hashes cover are unchanged; `AuditLog` converts at the boundary.
"""

from __future__ import annotations

from sqlalchemy import Column, Integer, LargeBinary, MetaData, String, Table, Text

metadata = MetaData()
"""The audit tables' own metadata, never used to create tables (migrations do)."""

audit_event = Table(
    "audit_event",
    metadata,
    # Keyed by its place in the chain (no surrogate id since 0020: one index, not two).
    Column("conversation_id", String(255), primary_key=True),
    Column("seq", Integer, primary_key=True, autoincrement=False),
    Column("event_id", LargeBinary, nullable=False),
    Column("kind", String(40), nullable=False),
    Column("turn_id", LargeBinary, nullable=False),
    # Ids and `prompt_sha256` in `store.id_bytes` form: a uuid hex (a sha256) as its bytes.
    Column("created_at", LargeBinary, nullable=False),
    # Its ISO text as 8 bytes of microseconds when canonical (`store.time_bytes`).
    Column("payload_json", LargeBinary, nullable=False),
    # The payload's canonical JSON (what the row hash covers) in `compact.deflate` form.
    Column("prompt_sha256", LargeBinary, nullable=True),
    Column("hash", LargeBinary, nullable=False),
    # The row hash's 32 bytes (`bytes.fromhex` of `audit.chain.row_hash`).
)

audit_head = Table(
    "audit_head",
    metadata,
    Column("conversation_id", String(255), primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("hash", LargeBinary, nullable=False),
)

audit_prompt = Table(
    "audit_prompt",
    metadata,
    Column("sha256", String(64), primary_key=True),
    Column("text_json", Text, nullable=False),
)

audit_blob = Table(
    "audit_blob",
    metadata,
    Column("ref", String(32), primary_key=True),
    Column("kid", String(32), nullable=True),
    Column("body", LargeBinary, nullable=False),
)
"""The large, repeated parts of payloads, stored once by content address (`audit.blobs`;
migration `0014_audit_blobs`): `body` is the value's JSON (`compact.deflate` form), or its
AES-GCM sealing under data key `kid` (nonce and ciphertext, raw)."""
