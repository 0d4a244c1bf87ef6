"""frontdesk's typed errors as HTTP answers: one table, one JSON shape.

Every error answer is `{"detail": <message>, "type": <error class name>}`; the message is
the library's own (for bad text, exactly what `InvalidUserText` says). A conversation or
message of another user is answered exactly as a missing one (404), so ids cannot be
probed. A failed turn is 503 with the safe reply to show (`detail` and `text`); a turn
refused by the admission limit (`ServiceBusy`) is 503 with `Retry-After`, nothing stored.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import structlog
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, DisconnectionError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from frontdesk.errors import (
    SAFE_REPLY,
    AuditWriteError,
    ConversationBusy,
    ConversationHandedOff,
    ConversationNotFound,
    FrontdeskError,
    HandoffClaimed,
    IdempotencyConflict,
    InvalidInput,
    InvalidToken,
    InvalidUserText,
    LeaseLost,
    MemoryNotFound,
    MessageNotFound,
    NotHandedOff,
    QuestionOverBudget,
    ServiceBusy,
    SpendLimitReached,
    StoreError,
    StoreUnavailable,
    TurnFailed,
    UserError,
)

# Most specific first: the first class an error is an instance of decides its status.
STATUS: tuple[tuple[type[FrontdeskError], int], ...] = (
    (InvalidToken, 401),
    (SpendLimitReached, 429),
    (ConversationNotFound, 404),
    (MessageNotFound, 404),
    (MemoryNotFound, 404),
    (IdempotencyConflict, 409),
    (ConversationBusy, 409),
    (NotHandedOff, 409),
    (HandoffClaimed, 409),
    (ConversationHandedOff, 409),
    (LeaseLost, 409),
    (InvalidUserText, 422),
    (InvalidInput, 422),
    (QuestionOverBudget, 422),
    (TurnFailed, 503),
    (ServiceBusy, 503),
    (StoreUnavailable, 503),
    (StoreError, 503),
    (AuditWriteError, 503),
    (UserError, 422),
)
OUTAGES = (StoreError, AuditWriteError)
"""The store or the audit log cannot be written or read right now: retryable (503, with
`Retry-After` and the safe reply), never a 500."""


_OUTAGE_SQLSTATE_CLASSES = ("08", "53", "57")
"""Connection exceptions, insufficient resources, operator intervention (a terminated
backend, a server shutting down or starting up)."""
_SQLITE_OUTAGES = ("locked", "unable to open", "disk i/o", "readonly", "not a database", "busy")
log = structlog.get_logger("service")


def _is_outage(error: BaseException) -> bool:
    if isinstance(error, DBAPIError):
        orig = error.orig
        return error.connection_invalidated or (orig is not None and _is_outage(orig))
    if isinstance(error, DisconnectionError | PoolTimeout):
        return True
    if isinstance(error, asyncpg.InterfaceError | asyncpg.PostgresConnectionError):
        return True
    if isinstance(error, asyncpg.PostgresError):
        return str(getattr(error, "sqlstate", "") or "")[:2] in _OUTAGE_SQLSTATE_CLASSES
    if isinstance(error, sqlite3.OperationalError | sqlite3.DatabaseError):
        return any(word in str(error).lower() for word in _SQLITE_OUTAGES)
    return isinstance(error, ConnectionError | TimeoutError)


def store_outage(error: BaseException) -> bool:
    """Whether `error`, or an error that caused it (or one of a group's), is the database
    refusing or dropping connections, locked or unreadable: a 503 the client retries, not
    a bug. Errors the store did not translate itself (a read on a connection the server
    terminated, a connect refused) reach the routes as the driver raised them."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if _is_outage(current):
            return True
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        todo.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


def _store_name(request: Request) -> str:
    """`postgresql` or `sqlite`: which store is unavailable, for the client and the logs."""
    try:
        return str(request.app.state.service.orchestrator.store.engine.url.get_backend_name())
    except Exception:  # Not opened, or no store: say what is known.
        return "database"


def outage_response(request: Request, error: BaseException | None = None) -> JSONResponse:
    """503 with `Retry-After` and the safe reply; `store` names the database that failed."""
    store = _store_name(request)
    if error is not None:
        log.warning("store.unavailable", store=store, error=type(error).__name__)
    body = {"detail": SAFE_REPLY, "text": SAFE_REPLY, "type": "StoreUnavailable", "store": store}
    return JSONResponse(body, status_code=503, headers={"Retry-After": "1"})


DRIVER_ERRORS: tuple[type[Exception], ...] = (
    SQLAlchemyError,
    sqlite3.Error,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    OSError,
)
"""What the drivers raise when the store has not translated it (see `store_outage`)."""


def status_of(error: FrontdeskError) -> int:
    """The HTTP status for a frontdesk error (500 for what the caller cannot fix)."""
    for kind, status in STATUS:
        if isinstance(error, kind):
            return status
    return 500


def error_response(error: FrontdeskError, store: str | None = None) -> JSONResponse:
    """The JSON answer for `error` (`store`: the database an outage names)."""
    status = status_of(error)
    body: dict[str, Any] = {"detail": str(error), "type": type(error).__name__}
    headers: dict[str, str] = {}
    if isinstance(error, TurnFailed):
        body.update(detail=error.safe_reply, text=error.safe_reply)
        body["user_message_id"] = error.user_message_id
        headers["Retry-After"] = "1"
    elif isinstance(error, ConversationNotFound | MessageNotFound):
        body["detail"] = "no such conversation or message for this user"
    elif isinstance(error, SpendLimitReached):
        body["detail"] = "this account has used its allowance for now; try again later"
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    elif isinstance(error, ServiceBusy):  # Nothing was stored: the same key runs it once.
        body["retry_after"] = round(error.retry_after)
        headers["Retry-After"] = str(max(1, round(error.retry_after)))
    elif isinstance(error, MemoryNotFound):
        body["detail"] = "no such memory for this user"
    elif isinstance(error, OUTAGES):
        body.update(detail=SAFE_REPLY, text=SAFE_REPLY)
        if store is not None and isinstance(error, StoreError):
            body["store"] = store
    elif status == 500:
        body["detail"] = "internal error"  # The log has the details; the client does not.
    if isinstance(error, ConversationBusy | LeaseLost | StoreError | AuditWriteError):
        headers["Retry-After"] = "1"
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
    return JSONResponse(body, status_code=status, headers=headers)


_HTTP_TYPES = {
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    408: "RequestTimeout",
    413: "RequestTooLarge",
    428: "IdempotencyKeyRequired",
    429: "TooManyRequests",
}


def _where(error: Mapping[str, Any]) -> str:
    return ".".join(str(part) for part in error.get("loc", ()))


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette names only the first route's,
    and GET and DELETE of one path are two routes)."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(r.matches(scope)[0] is Match.FULL for r in request.app.router.routes):
            allowed.append(method)
    return allowed


def install(app: FastAPI) -> None:
    """Answer every error in the one JSON shape: frontdesk's own, FastAPI's request
    validation (a 422 whose `detail` says which field, `errors` lists them all) and HTTP
    errors (403, 404, 405, 429)."""

    async def frontdesk_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, FrontdeskError)
        if isinstance(error, AuditWriteError) and store_outage(error):
            # The audit (of an operator's read, say) could not be written because the
            # database is locked or gone: the client sees the outage it is, naming the store.
            return outage_response(request, error)
        return error_response(error, _store_name(request))

    async def driver_error(request: Request, error: Exception) -> JSONResponse:
        # A database error the store did not translate: an outage is 503; anything else
        # goes on to the 500 below (and the server's log, with its traceback).
        if store_outage(error):
            return outage_response(request, error)
        raise error

    async def invalid_request(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        # Only where and what: the value itself is not echoed (it may be NaN, which JSON
        # cannot carry, or personal data).
        errors = [
            {
                "loc": list(e.get("loc", ())),
                "msg": str(e.get("msg", "invalid")),
                "type": e.get("type"),
            }
            for e in error.errors()
        ]
        detail = "; ".join(f"{_where(e)}: {e['msg']}" for e in errors)
        if any(e["type"] == "json_invalid" for e in errors):
            body = {"detail": f"the body is not JSON: {detail}", "type": "MalformedJSON"}
            return JSONResponse(body, status_code=400)
        body = {
            "detail": detail or "invalid request",
            "type": "RequestValidationError",
            "errors": jsonable_encoder(errors),
        }
        return JSONResponse(body, status_code=422)

    async def http_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        body = {
            "detail": str(error.detail),
            "type": _HTTP_TYPES.get(error.status_code, "HTTPError"),
        }
        headers = dict(error.headers or {})
        if error.status_code == 405:
            headers["Allow"] = ", ".join(_allowed(request))
        return JSONResponse(body, status_code=error.status_code, headers=headers)

    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        # A bug: logged by the server with its traceback; the client gets the one shape.
        if store_outage(error):  # ... unless a database outage is what it wraps.
            return outage_response(request)
        body = {"detail": "internal error", "type": "InternalError"}
        return JSONResponse(body, status_code=500)

    app.add_exception_handler(Exception, unexpected)
    app.add_exception_handler(FrontdeskError, frontdesk_error)
    for kind in DRIVER_ERRORS:
        app.add_exception_handler(kind, driver_error)
    app.add_exception_handler(RequestValidationError, invalid_request)
    app.add_exception_handler(StarletteHTTPException, http_error)
