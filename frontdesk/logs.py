"""Keep user text and API keys out of logs, even with DEBUG logging switched on.

Some libraries under frontdesk log whole request payloads at DEBUG: the provider SDKs log
every request's options (the user's messages), and the SQLite driver logs every statement
with its parameters. frontdesk's own logs carry ids, never text; this module drops those
libraries' DEBUG records, and SQLAlchemy engines are created with `hide_parameters=True`.
Set `FRONTDESK_LOG_PAYLOADS=1` to see them while debugging on your own machine.
"""

from __future__ import annotations

import logging
import os

PAYLOAD_LOGGERS = ("anthropic._base_client", "openai._base_client", "aiosqlite")
"""Loggers whose DEBUG records hold request bodies or statement parameters."""


class _DropPayloadRecords(logging.Filter):
    """Lets INFO and above through; drops the DEBUG records that carry payloads."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.INFO


def protect_logs() -> None:
    """Install the filter on the payload loggers (idempotent)."""
    if os.environ.get("FRONTDESK_LOG_PAYLOADS") == "1":
        return
    for name in PAYLOAD_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropPayloadRecords) for f in logger.filters):
            logger.addFilter(_DropPayloadRecords())
