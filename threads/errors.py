"""The conversation store's part of the error tree (defined in `frontdesk.errors`)."""

from frontdesk.errors import (
    ConversationBusy,
    ConversationHandedOff,
    ConversationNotFound,
    HandoffClaimed,
    IdempotencyConflict,
    InvalidInput,
    LeaseLost,
    MessageNotFound,
    MessageNotInConversation,
    NotHandedOff,
    QuestionOverBudget,
    SchemaOutdated,
    StoreError,
    StoreUnavailable,
    UserStateUnavailable,
)

__all__ = [
    "ConversationBusy",
    "ConversationHandedOff",
    "ConversationNotFound",
    "HandoffClaimed",
    "IdempotencyConflict",
    "InvalidInput",
    "LeaseLost",
    "MessageNotFound",
    "MessageNotInConversation",
    "NotHandedOff",
    "QuestionOverBudget",
    "SchemaOutdated",
    "StoreError",
    "StoreUnavailable",
    "UserStateUnavailable",
]
