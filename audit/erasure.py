"""Erasure and retention steps on the audit tables (crypto-shredding).

The rows and the chain stay (the log is append-only); what goes is the data keys their
payloads are encrypted under, so those payloads are unreadable for good. Each function
runs in its caller's transaction and is idempotent: a destroyed key is not counted again.
The order of the steps is the orchestrator's (`orchestrator/erasure.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy import Connection

from frontdesk.audit import compact, crypto
from frontdesk.audit.refs import UserRefs, legacy
from frontdesk.audit.tables import audit_event

__all__ = ["rows_in_clear", "shred_before", "shred_user"]


def rows_in_clear(conn: Connection, conversation_ids: Sequence[str]) -> int:
    """How many audit rows of these conversations were written without a master key: they
    stay readable, since the chain forbids changing them (see docs/privacy.md)."""
    if not conversation_ids:
        return 0
    # The stored form is deflated (`audit.compact`), so the envelope is told in Python.
    query = sa.select(audit_event.c.payload_json).where(
        audit_event.c.conversation_id.in_(conversation_ids)
    )
    return sum(1 for stored in conn.execute(query).scalars() if not _sealed(stored))


def _sealed(stored: bytes | str) -> bool:
    """Whether a stored payload is an envelope (an undecodable one counts as clear)."""
    try:
        return crypto.is_envelope_text(compact.inflate(stored))
    except (ValueError, UnicodeDecodeError):
        return False


def shred_user(conn: Connection, user_id: str, refs: UserRefs) -> int:
    """Destroy every live data key of `user_id`; how many were destroyed.

    Keys are looked for under the user's ref (`refs`, the log's) and under the plain digest
    older versions filed them under; destroyed keys left under that digest (by this run or
    an erasure before the upgrade) are filed under the ref, so the digest leaves the table.
    """
    ref = refs.ref("data_key", user_id)
    done = crypto.destroy(conn, refs=refs.all("data_key", user_id))
    if legacy(user_id) != ref:
        crypto.refile_destroyed(conn, legacy(user_id), ref)
    return done


def shred_before(conn: Connection, period: str, *, dry_run: bool = False) -> int:
    """Destroy the live data keys of every month before `period` ("YYYY-MM"); with
    `dry_run`, only count them."""
    if dry_run:
        return crypto.count_live(conn, before_period=period)
    return crypto.destroy(conn, before_period=period)
