"""Chain ids for audit events that belong to no single conversation.

A forgotten memory or an erased user is recorded in a chain of its own, keyed by a digest of
the user id so that the chain id carries no personal data in clear.
"""

from __future__ import annotations

import hashlib

USER_CHAIN_PREFIX = "user:"


def user_chain_id(user_id: str) -> str:
    """The audit chain id for events about `user_id` that belong to no conversation."""
    digest = hashlib.sha256(user_id.encode("utf-8")).hexdigest()[:32]
    return f"{USER_CHAIN_PREFIX}{digest}"


def is_user_chain(conversation_id: str) -> bool:
    """True for a chain made by `user_chain_id` (no conversation row stands behind it)."""
    return conversation_id.startswith(USER_CHAIN_PREFIX)
