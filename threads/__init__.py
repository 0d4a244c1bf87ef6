"""Messages as a tree, the conversation store, the thread builder, token budgets.

The store keeps every message the user and the assistant exchanged as one row of a tree
per conversation (edits and regenerations are branches), on SQLite or PostgreSQL.
"""

from frontdesk.errors import (
    ConversationBusy,
    IdempotencyConflict,
    InvalidInput,
    MessageNotFound,
    MessageNotInConversation,
    SchemaOutdated,
    StoreError,
    StoreUnavailable,
)
from frontdesk.threads._records import ConversationRecord, MessageRecord
from frontdesk.threads.handler_state import ERASED_MARKER, HandlerState, HandlerStore
from frontdesk.threads.store import UNSET, ConversationStore

__all__ = [
    "ERASED_MARKER",
    "UNSET",
    "ConversationBusy",
    "ConversationRecord",
    "ConversationStore",
    "HandlerState",
    "HandlerStore",
    "IdempotencyConflict",
    "InvalidInput",
    "MessageNotFound",
    "MessageNotInConversation",
    "MessageRecord",
    "SchemaOutdated",
    "StoreError",
    "StoreUnavailable",
]
