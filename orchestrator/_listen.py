"""The seam through which a running turn tells a streaming caller what it decided.

`Orchestrator.stream` (orchestrator/stream.py) sets a listener for the turn's task; the
turn (orchestrator/turn.py) reports the route, the extraction and the response expert's
text deltas here. Without a listener (`handle`), every call is a no-op and nothing streams.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Literal, Protocol

from pydantic import BaseModel

from frontdesk.experts import NeedMoreInfo
from frontdesk.experts.providers.base import OnDelta


class TurnListener(Protocol):
    """What a streaming caller is told while its turn runs."""

    def routed(self, category: str, by: Literal["router", "triage"]) -> None:
        """The turn goes to `category` (final: never shown partially); `by` is what
        `Reply.routed_by` will say: `router` when no triage call was made."""

    def extracted(self, request: BaseModel | None, need_more_info: NeedMoreInfo | None) -> None:
        """The request expert's answer for the routed category."""

    async def delta(self, text: str) -> None:
        """A piece of the response expert's reply text."""


_listener: contextvars.ContextVar[TurnListener | None] = contextvars.ContextVar(
    "frontdesk_turn_listener", default=None
)


@contextlib.contextmanager
def listening(listener: TurnListener) -> Iterator[None]:
    """Send what turns run inside this block (in this task and its children) to `listener`."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)


def routed(category: str, *, by: Literal["router", "triage"] = "triage") -> None:
    """Report the route, and whether the router made it, to the listener, if any."""
    listener = _listener.get()
    if listener is not None:
        listener.routed(category, by)


def extracted(request: BaseModel | None, need_more_info: NeedMoreInfo | None) -> None:
    """Report the extraction to the listener, if any."""
    listener = _listener.get()
    if listener is not None:
        listener.extracted(request, need_more_info)


def delta_sink() -> OnDelta | None:
    """Where the response expert streams its text: the listener's, or `None` (no stream)."""
    listener = _listener.get()
    return listener.delta if listener is not None else None
