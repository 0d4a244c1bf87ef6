"""Slow clients bounded: uvicorn's HTTP/1.1 protocol with a header and a body deadline and a
cap on the connections one worker keeps open.

uvicorn has no read timeout: its keep-alive timer is cancelled by any byte, so a client that
sends one header line every few seconds (or a body at 100 B/s) holds a connection, and a
file descriptor, for as long as it likes. Here every request must have all its headers
within `FRONTDESK_HEADER_TIMEOUT` seconds of the connection opening (or of the previous
answer), and all its body within `FRONTDESK_BODY_TIMEOUT` seconds of its headers; a client
that is slower gets `408` and the connection is closed. A connection over
`FRONTDESK_MAX_CONNECTIONS` (per worker) is answered `503` with `Retry-After` and closed at
once. uvicorn's workers build the protocol from the environment, like the app.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 30.0
DEFAULT_MAX_CONNECTIONS = 512

_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\n"


def _answer(head: bytes, detail: str, kind: str) -> bytes:
    body = json.dumps({"detail": detail, "type": kind}).encode()
    return head + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body) + body


def _setting(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with header and body deadlines and a connection cap."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = _setting("FRONTDESK_HEADER_TIMEOUT", DEFAULT_HEADER_TIMEOUT)
        self.body_timeout = _setting("FRONTDESK_BODY_TIMEOUT", DEFAULT_BODY_TIMEOUT)
        self.max_connections = int(_setting("FRONTDESK_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS))
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for = "headers"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.write(
                _answer(_BUSY, "too many connections; retry shortly", "TooManyConnections")
            )
            transport.close()
            return
        self._arm("headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._follow()

    def _follow(self) -> None:
        """Re-arm the deadline for what the client owes now: headers, a body, or nothing."""
        state = self.conn.their_state
        if state is h11.IDLE:
            if self._waiting_for != "headers":
                self._arm("headers")
        elif state is h11.SEND_BODY:
            if self._waiting_for != "body":
                self._arm("body")
        else:
            self._disarm()

    def _arm(self, what: str) -> None:
        self._disarm()
        self._waiting_for = what
        seconds = self.header_timeout if what == "headers" else self.body_timeout
        self._deadline = self.loop.call_later(seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._waiting_for = ""

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        started = self.cycle is not None and self.cycle.response_started
        if not started:
            what = self._waiting_for or "request"
            self.transport.write(_answer(_TIMEOUT, f"the {what} came too slowly", "RequestTimeout"))
        self.transport.close()
