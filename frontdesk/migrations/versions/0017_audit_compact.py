"""Audit texts in a compact stored form, and no index that no query uses.

Each payload's canonical JSON and each clear blob's body are stored deflated under the
preset dictionary of `audit.compact` (the conversions are `_frozen_audit.repack`, the
revision's own copy of the audit code), sealed blobs as raw nonce and ciphertext
(base64 text before); `audit_event.payload_json` and `audit_blob.body` become `bytea` on
PostgreSQL (SQLite's columns take bytes as they are). The row hashes cover the JSON
texts, which do not change: chains, heads and anchors stay valid and no key is needed.
Payloads and blobs sealed from now on are deflated before they are sealed (an envelope
says so with `zip`). Going back down seals them again plain when the master key is set
(`FRONTDESK_MASTER_KEY`), and those chains are linked again from the first row that
changed (as `0014` does; take external anchors again after it); without the key they stay
as they are, verifiable but not readable by the older code (a warning counts them). A
conversation whose chain does not verify is left as it is.
`ix_audit_event_turn` is dropped: no query reads rows by turn (they are read per
conversation in chain order, by the `(conversation_id, seq)` key). The freed pages are
reused by later rows; `VACUUM` (SQLite) or `VACUUM FULL` (PostgreSQL) gives them back.

Revision ID: 0017_audit_compact
Revises: 0019_jobs_more
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog
from alembic import op

from frontdesk.migrations._frozen_audit import crypto
from frontdesk.migrations._frozen_audit.repack import compact_log, expand_log, unzip_log

log = structlog.get_logger("migrations")

revision: str = "0017_audit_compact"
down_revision: str | Sequence[str] | None = "0019_jobs_more"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SQLITE_GUARD = (
    "CREATE TRIGGER audit_event_no_update BEFORE UPDATE ON audit_event "
    "BEGIN SELECT RAISE(ABORT, 'audit_event is append-only'); END"
)
_COLUMNS = (("audit_event", "payload_json"), ("audit_blob", "body"))


def _lift_guard(postgresql: bool) -> None:
    if postgresql:
        op.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_append_only")
    else:
        op.execute("DROP TRIGGER IF EXISTS audit_event_no_update")


def _restore_guard(postgresql: bool) -> None:
    if postgresql:
        op.execute("ALTER TABLE audit_event ENABLE TRIGGER audit_event_append_only")
    else:
        op.execute(_SQLITE_GUARD)


def upgrade() -> None:
    """Drop the unused index; store the texts deflated (bytes)."""
    bind = op.get_bind()
    postgresql = bind.dialect.name == "postgresql"
    op.drop_index("ix_audit_event_turn", table_name="audit_event")
    if postgresql:
        for table, column in _COLUMNS:
            op.execute(
                f"ALTER TABLE {table} ALTER COLUMN {column} TYPE bytea"
                f" USING convert_to({column}, 'UTF8')"
            )
            # The values come deflated: PostgreSQL's own compression (which 0014 asked for
            # from 256 bytes) would only spend time on them.
            op.execute(f"ALTER TABLE {table} RESET (toast_tuple_target)")
    _lift_guard(postgresql)
    compact_log(bind)
    _restore_guard(postgresql)


def downgrade() -> None:
    """Texts back as text (sealed blobs as base64), and the index back."""
    bind = op.get_bind()
    postgresql = bind.dialect.name == "postgresql"
    provider = crypto.master_key_from_env()
    _lift_guard(postgresql)
    if postgresql:
        op.execute("ALTER TABLE audit_event DISABLE TRIGGER audit_event_link")
    unzipped = unzip_log(bind, provider)  # Sealed plain again, their rows linked again.
    expanded = expand_log(bind, provider)
    if unzipped.locked_rows or expanded.locked_blobs:
        log.warning(
            "audit_downgrade_left_deflated",
            rows=unzipped.locked_rows,
            blobs=expanded.locked_blobs,
            hint=f"the code before 0017 cannot decrypt these into text; run the downgrade"
            f" with {crypto.MASTER_KEY_ENV} set to convert them",
        )
    if postgresql:
        op.execute("ALTER TABLE audit_event ENABLE TRIGGER audit_event_link")
    _restore_guard(postgresql)
    if postgresql:
        for table, column in _COLUMNS:
            op.execute(
                f"ALTER TABLE {table} ALTER COLUMN {column} TYPE text"
                f" USING convert_from({column}, 'UTF8')"
            )
            op.execute(f"ALTER TABLE {table} SET (toast_tuple_target = 256)")
    op.create_index("ix_audit_event_turn", "audit_event", ["conversation_id", "turn_id"])
