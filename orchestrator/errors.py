"""Errors the orchestrator raises to the embedding bot.

    FrontdeskError
    ├── UserError
    │   └── InvalidUserText          the text cannot be a user turn (nothing stored, no model call)
    │       ├── EmptyMessage         empty or whitespace-only
    │       ├── InputTooLarge        over `max_message_chars`
    │       └── ForbiddenCharacters  NUL or other control characters, lone surrogates
    └── TurnFailed                   a turn could not be answered; the user message is stored
                                     (`user_message_id`), `safe_reply` is what to show, and a
                                     retry with the same client_message_id finishes the turn

The store's errors (`ConversationBusy`, `IdempotencyConflict`, `MessageNotFound`) and the
model layer's errors are re-exported from `orchestrator` so callers import from one place.
"""

from __future__ import annotations

from frontdesk.errors import FrontdeskError, UserError


class InvalidUserText(UserError):
    """The text cannot be stored or sent as a user turn."""


class EmptyMessage(InvalidUserText):
    """Empty or whitespace-only text."""


class InputTooLarge(InvalidUserText):
    """Text longer than the configured limit."""


class ForbiddenCharacters(InvalidUserText):
    """NUL or other control characters, or invalid surrogates."""


SAFE_REPLY = (
    "Sorry, we can't answer right now because of a problem on our side. Your message is"
    " saved; please try again in a moment."
)


class TurnFailed(FrontdeskError):
    """The turn could not be answered; the user's message is stored."""

    def __init__(
        self, message: str, *, user_message_id: str, stage: str, safe_reply: str = SAFE_REPLY
    ) -> None:
        super().__init__(message)
        self.user_message_id = user_message_id
        self.stage = stage
        self.safe_reply = safe_reply
