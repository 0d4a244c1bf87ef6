"""What a category handler's failure does: it is seen, then contained or raised.

A handler is the developer's code, so any exception from it (or an answer that is not an
`Outcome`) is expected to happen while it is being written. Every failure is logged at
error level as `handler.failed` with its traceback (on stderr unless the application
configured structlog itself) and audited as `handler_error` with the traceback and the
exception's message. The log line shows where it failed (every frame, with its source
line) but not the message, which may quote the user ("no user text in logs", even at
DEBUG); the audit row keeps it (encrypted per user with a master key, redacted in the
views), and `FRONTDESK_LOG_PAYLOADS=1` puts it in the log on a developer's machine.

Then `Orchestrator(handler_errors=...)` decides: `"reply"` answers with the apology
outcome; `"raise"` fails the turn with `HandlerFailed` (`__cause__`: the handler's
exception), for development and tests.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any, Literal

import structlog

from frontdesk.errors import HandlerFailed
from frontdesk.experts import Outcome
from frontdesk.orchestrator import fallbacks
from frontdesk.orchestrator._recorder import TurnRecorder

HandlerErrors = Literal["reply", "raise"]
"""`Orchestrator(handler_errors=...)`."""

MODES: tuple[HandlerErrors, ...] = ("reply", "raise")


def checked(outcome: Any) -> Outcome:
    """The handler's answer as a checked `Outcome` (data checked again: the handler may have
    changed the dict after building it).

    Raises:
        TypeError: the handler returned something else.
        InvalidOutcome: its data cannot be stored as JSON.
    """
    if not isinstance(outcome, Outcome):
        raise TypeError(f"the handler returned {type(outcome).__name__}, not experts.Outcome")
    return Outcome(
        instruction=outcome.instruction,
        data=outcome.data,
        handoff=outcome.handoff,
        resolves=outcome.resolves,
        reply=outcome.reply,
    )


def failed(
    error: Exception,
    *,
    mode: HandlerErrors,
    category: str,
    conversation_id: str,
    turn_id: str,
    recorder: TurnRecorder,
) -> Outcome:
    """Log and audit a handler's failure; the apology outcome, or `HandlerFailed` raised.

    Raises:
        HandlerFailed: with `mode="raise"`, from `error`.
    """
    exception = f"{type(error).__name__}: {error}"
    trace = "".join(traceback.format_exception(error))
    recorder.note("handler_error", category=category, error=exception, traceback=trace)
    _log().error(
        "handler.failed",
        category=category,
        conversation_id=conversation_id,
        turn=turn_id,
        error=type(error).__name__,
        handler_errors=mode,
        exception=trace if os.environ.get("FRONTDESK_LOG_PAYLOADS") == "1" else _frames(error),
    )
    if mode == "raise":
        raise HandlerFailed(
            f"the {category} handler failed: {exception}",
            user_message_id=turn_id,
            category=category,
        ) from error
    return fallbacks.handler_failed()


def _frames(error: BaseException) -> str:
    """The traceback without the exception's message (which may quote the user)."""
    frames = "".join(traceback.format_list(traceback.extract_tb(error.__traceback__)))
    return (
        f"Traceback (most recent call last):\n{frames}{type(error).__name__}: (message kept"
        " out of logs; it is in the audit event handler_error: frontdesk audit show)"
    )


def _log() -> Any:
    """frontdesk's logger; on stderr when the application left structlog unconfigured
    (structlog's own default prints to stdout, where a script's output goes)."""
    if structlog.is_configured():
        return structlog.get_logger("frontdesk.handlers")
    return structlog.wrap_logger(
        structlog.PrintLogger(sys.stderr),
        processors=structlog.get_config()["processors"],
    )
