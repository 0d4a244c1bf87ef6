"""frontdesk's typed errors as HTTP answers: one table, one JSON shape.

Every error answer is `{"detail": <message>, "type": <error class name>}`; the message is
the library's own (for bad text, exactly what `InvalidUserText` says). A conversation or
message of another user is answered exactly as a missing one (404), so ids cannot be
probed. A failed turn is 503 with the safe reply to show (`detail` and `text`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from frontdesk.errors import (
    ConversationBusy,
    ConversationNotFound,
    FrontdeskError,
    IdempotencyConflict,
    InvalidInput,
    InvalidToken,
    InvalidUserText,
    LeaseLost,
    MessageNotFound,
    QuestionOverBudget,
    StoreUnavailable,
    TurnFailed,
    UserError,
)

# Most specific first: the first class an error is an instance of decides its status.
STATUS: tuple[tuple[type[FrontdeskError], int], ...] = (
    (InvalidToken, 401),
    (ConversationNotFound, 404),
    (MessageNotFound, 404),
    (IdempotencyConflict, 409),
    (ConversationBusy, 409),
    (LeaseLost, 409),
    (InvalidUserText, 422),
    (InvalidInput, 422),
    (QuestionOverBudget, 422),
    (TurnFailed, 503),
    (StoreUnavailable, 503),
    (UserError, 422),
)


def status_of(error: FrontdeskError) -> int:
    """The HTTP status for a frontdesk error (500 for what the caller cannot fix)."""
    for kind, status in STATUS:
        if isinstance(error, kind):
            return status
    return 500


def error_response(error: FrontdeskError) -> JSONResponse:
    """The JSON answer for `error`."""
    status = status_of(error)
    body: dict[str, Any] = {"detail": str(error), "type": type(error).__name__}
    headers: dict[str, str] = {}
    if isinstance(error, TurnFailed):
        body.update(detail=error.safe_reply, text=error.safe_reply)
        body["user_message_id"] = error.user_message_id
        headers["Retry-After"] = "1"
    elif isinstance(error, ConversationNotFound | MessageNotFound):
        body["detail"] = "no such conversation or message for this user"
    elif status == 500:
        body["detail"] = "internal error"  # The log has the details; the client does not.
    if isinstance(error, ConversationBusy | LeaseLost | StoreUnavailable):
        headers["Retry-After"] = "1"
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
    return JSONResponse(body, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    """Answer every frontdesk error through `error_response`."""

    async def handle(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, FrontdeskError)
        return error_response(error)

    app.add_exception_handler(FrontdeskError, handle)
