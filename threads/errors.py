"""Errors raised by the conversation store.

    FrontdeskError
    ├── UserError
    │   ├── ConfigError
    │   │   └── SchemaOutdated          the database schema is behind: run `frontdesk db upgrade`
    │   ├── InvalidInput                text or id the store cannot keep the same on every backend
    │   ├── IdempotencyConflict         a client message id reused with different text (409)
    │   └── MessageNotFound             no such message (or not in the named conversation)
    │       └── MessageNotInConversation
    └── StoreError                      an unexpected database failure
        ├── StoreUnavailable            transient (serialisation, deadlock, disconnect): retry
        └── ConversationBusy            another turn holds the conversation: retry later

`SchemaOutdated` is defined in `frontdesk.schema` (which every package may import) and
re-exported here, so `threads.errors.SchemaOutdated` is that same class.
"""

from __future__ import annotations

from frontdesk.errors import FrontdeskError, UserError
from frontdesk.schema import SchemaOutdated

__all__ = [
    "ConversationBusy",
    "IdempotencyConflict",
    "InvalidInput",
    "MessageNotFound",
    "MessageNotInConversation",
    "SchemaOutdated",
    "StoreError",
    "StoreUnavailable",
]


class InvalidInput(UserError):
    """Text or an id that cannot be stored identically on SQLite and PostgreSQL (NUL, bad UTF-8)."""


class IdempotencyConflict(UserError):
    """The client message id was already used in this conversation for a different text.

    Nothing was written. Send the new text with a new client message id.
    """

    def __init__(self, message: str, *, conversation_id: str, client_message_id: str) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.client_message_id = client_message_id


class MessageNotFound(UserError):
    """No message has this id."""

    def __init__(self, message: str, *, message_id: str) -> None:
        super().__init__(message)
        self.message_id = message_id


class MessageNotInConversation(MessageNotFound):
    """The message exists but belongs to another conversation."""


class StoreError(FrontdeskError):
    """The database failed in a way the store did not expect.

    `retryable` says whether running the operation again may help.
    """

    retryable: bool = False


class StoreUnavailable(StoreError):
    """A transient failure (serialisation failure, deadlock, lost connection) that outlived the
    store's own bounded retries; the whole operation can be retried."""

    retryable = True


class ConversationBusy(StoreError):
    """Another turn held the conversation for longer than the caller was willing to wait."""

    retryable = True

    def __init__(self, message: str, *, conversation_id: str, waited: float) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.waited = waited
