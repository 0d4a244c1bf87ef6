"""The audit log's part of the error tree (defined in `frontdesk.errors`),
re-exported for code written against this module: import from `frontdesk.errors`."""

from frontdesk.errors import (
    AuditConfigError,
    AuditError,
    AuditKeyError,
    AuditPayloadError,
    AuditWriteError,
    ReplayError,
    UnknownConversation,
)

__all__ = [
    "AuditConfigError",
    "AuditError",
    "AuditKeyError",
    "AuditPayloadError",
    "AuditWriteError",
    "ReplayError",
    "UnknownConversation",
]
