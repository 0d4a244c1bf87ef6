"""Errors raised by the audit log.

FrontdeskError
├── UserError
│   ├── AuditPayloadError           an event that cannot be stored as canonical JSON
│   ├── UnknownConversation         no audit rows for the conversation asked for
│   └── ConfigError
│       └── AuditConfigError        a database URL or setting the audit log cannot use
└── AuditError                      the audit log failed at run time
    └── AuditWriteError             a batch could not be written (and was not spooled)
"""

from __future__ import annotations

from frontdesk.errors import ConfigError, FrontdeskError, UserError


class AuditError(FrontdeskError):
    """The audit log failed at run time."""


class AuditWriteError(AuditError):
    """A batch of events could not be written; with `on_failure="raise"` the turn fails."""

    def __init__(self, message: str, *, conversation_id: str, events: int) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.events = events


class AuditPayloadError(UserError):
    """An event payload holds something that is not JSON (NaN, a socket, ...)."""


class UnknownConversation(UserError):
    """No audit rows exist for the conversation id given."""


class AuditConfigError(ConfigError):
    """A database URL or audit setting that cannot work; the message says what to use."""


class ReplayError(AuditError):
    """A recorded turn could not be replayed (e.g. no recorded response for an expert)."""
