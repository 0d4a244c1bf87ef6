"""The turn's part of the error tree (defined in `frontdesk.errors`),
re-exported for code written against this module: import from `frontdesk.errors`."""

from frontdesk.errors import (
    SAFE_REPLY,
    EmptyMessage,
    ForbiddenCharacters,
    HandlerFailed,
    InputTooLarge,
    InvalidUserText,
    TurnFailed,
)

__all__ = [
    "EmptyMessage",
    "ForbiddenCharacters",
    "HandlerFailed",
    "InputTooLarge",
    "InvalidUserText",
    "SAFE_REPLY",
    "TurnFailed",
]
