"""Keep user text and API keys out of logs, even with DEBUG logging switched on.

Some libraries under frontdesk log whole request payloads at DEBUG: the provider SDKs log
every request's options (the user's messages), and the SQLite driver logs every statement
with its parameters. frontdesk's own logs carry ids, never text; this module drops those
libraries' DEBUG records, and SQLAlchemy engines are created with `hide_parameters=True`.

What does reach a structlog line (an error message quoting the user, a handler's own log
call) goes through `RedactingProcessor` first: card numbers, IBANs, emails, phone numbers,
bank details and secrets are replaced (`frontdesk.redaction`). It is put in structlog's
chain as it is when frontdesk is imported, just before the renderer; an application that
configures its own chain afterwards adds `RedactingProcessor()` to it.

Set `FRONTDESK_LOG_PAYLOADS=1` to see all of it while debugging on your own machine.

While an OpenTelemetry span is in progress (`frontdesk.telemetry`), every line also carries
its `trace_id` and `span_id` (`TraceIdsProcessor`, put in the chain the same way), so a log
line leads to its trace.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from typing import Any

import structlog
from pydantic import BaseModel

from frontdesk import telemetry
from frontdesk.redaction import Redactor, field_rules

__all__ = [
    "PAYLOAD_LOGGERS",
    "UNREDACTED_KEYS",
    "RedactingProcessor",
    "TraceIdsProcessor",
    "protect_logs",
]

PAYLOAD_LOGGERS = ("anthropic._base_client", "openai._base_client", "aiosqlite")
"""Loggers whose DEBUG records hold request bodies or statement parameters."""


class _DropPayloadRecords(logging.Filter):
    """Lets INFO and above through; drops the DEBUG records that carry payloads."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.INFO


EventDict = MutableMapping[str, Any]
UNREDACTED_KEYS = frozenset({"timestamp", "level", "logger", "logger_name", "trace_id", "span_id"})
"""Keys the processors before it fill in, never with user text (a time stamp is left alone
rather than searched for card numbers on every line)."""
_PLAIN = (str, int, float, bool, type(None), dict, list, tuple)


class RedactingProcessor:
    """A structlog processor that redacts every value of an event before it is rendered.

    Strings, numbers and JSON-like values go through `Redactor.value`; a pydantic model is
    shown as its fields, with the rules its class declares (`Redact("mask")`, ...); any
    other object is replaced by its redacted `repr` when that holds something to redact. An
    exception (`exc_info`) is formatted here, so its message and traceback are redacted too.

    Args:
        redactor: the policy to apply (default: every built-in detector, and secrets).
    """

    def __init__(self, redactor: Redactor | None = None) -> None:
        self.redactor = redactor or Redactor()

    def __call__(self, logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
        """Redact `event_dict` in place and return it."""
        if event_dict.get("exc_info"):
            event_dict = structlog.processors.format_exc_info(logger, method_name, event_dict)
        for key, value in list(event_dict.items()):
            if key not in UNREDACTED_KEYS:
                event_dict[key] = self._shown(value)
        return event_dict

    def _shown(self, value: Any) -> Any:
        if isinstance(value, _PLAIN):
            return self.redactor.value(value)
        if isinstance(value, BaseModel):
            rules = field_rules(type(value))
            return self.redactor.request(value.model_dump(mode="json"), rules)
        text = repr(value)
        shown = self.redactor.text(text)
        return value if shown == text else shown


class TraceIdsProcessor:
    """A structlog processor that adds `trace_id` and `span_id` while a span is in progress
    (hex, as OpenTelemetry shows them); a line outside any span is left as it is."""

    def __call__(self, logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
        """Add the ids of the current span to `event_dict`, if there is one."""
        ids = telemetry.current_ids()
        if ids is not None:
            event_dict.setdefault("trace_id", ids[0])
            event_dict.setdefault("span_id", ids[1])
        return event_dict


def _install_processor(kind: type[RedactingProcessor] | type[TraceIdsProcessor]) -> None:
    """Put a `kind` processor before the renderer of structlog's current chain."""
    processors = structlog.get_config()["processors"]
    if any(isinstance(p, kind) for p in processors):
        return
    # The chain is changed in place rather than through `structlog.configure`, which would
    # mark structlog configured and make an application's `configure_once` a no-op.
    if isinstance(processors, list):
        processors.insert(max(0, len(processors) - 1), kind())


def protect_logs() -> None:
    """Install the filter on the payload loggers, the redacting processor and the trace
    ids processor (idempotent)."""
    if telemetry.available():
        _install_processor(TraceIdsProcessor)
    if os.environ.get("FRONTDESK_LOG_PAYLOADS") == "1":
        return
    for name in PAYLOAD_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropPayloadRecords) for f in logger.filters):
            logger.addFilter(_DropPayloadRecords())
    _install_processor(RedactingProcessor)
