"""Chain ids for audit events that belong to no single conversation.

A forgotten memory or an erased user is recorded in a chain of its own, named by the user's
ref (`frontdesk.audit.refs`): keyed with a master key, so the chain id carries no personal
data and cannot be tested against guessed ids; the plain digest without one.
"""

from __future__ import annotations

from frontdesk.audit.refs import UNKEYED, UserRefs, legacy

USER_CHAIN_PREFIX = "user:"


def user_chain_id(user_id: str, refs: UserRefs = UNKEYED) -> str:
    """The audit chain id for events about `user_id` that belong to no conversation.

    Pass the log's refs (`AuditLog.refs`); the default is the plain digest, which is what a
    log without a master key uses.
    """
    return f"{USER_CHAIN_PREFIX}{refs.ref('user_chain', user_id)}"


def legacy_user_chain_id(user_id: str) -> str:
    """The chain id versions before revision 0018 wrote a user's events to (a plain digest).

    Such a chain stays readable and verifiable under its old id (rows are never renamed:
    the chain forbids it); new events go to `user_chain_id`.
    """
    return f"{USER_CHAIN_PREFIX}{legacy(user_id)}"


def is_user_chain(conversation_id: str) -> bool:
    """True for a chain made by `user_chain_id` (no conversation row stands behind it)."""
    return conversation_id.startswith(USER_CHAIN_PREFIX)
