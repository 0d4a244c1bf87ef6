"""The conversation store's part of the error tree (defined in `frontdesk.errors`)."""

from frontdesk.errors import (
    ConversationBusy,
    ConversationNotFound,
    IdempotencyConflict,
    InvalidInput,
    LeaseLost,
    MessageNotFound,
    MessageNotInConversation,
    QuestionOverBudget,
    SchemaOutdated,
    StoreError,
    StoreUnavailable,
    UserStateUnavailable,
)

__all__ = [
    "ConversationBusy",
    "ConversationNotFound",
    "IdempotencyConflict",
    "InvalidInput",
    "LeaseLost",
    "MessageNotFound",
    "MessageNotInConversation",
    "QuestionOverBudget",
    "SchemaOutdated",
    "StoreError",
    "StoreUnavailable",
    "UserStateUnavailable",
]
