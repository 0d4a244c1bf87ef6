"""`Orchestrator.stream`: one turn as typed events, the reply's text as the provider sends it.

Events, in order: `routed` (the category, and `routed_by`: `router` or `triage`, as the
reply will say), `extracted` (for a category with a request expert), `delta`... (the
response expert's text only; routing and extraction are never shown partially), then
exactly one of `done` (the same `Reply` `handle` returns; the deltas joined equal
`done.reply.text`) or `failed` (`TurnFailed`: the user message is kept, `safe_reply`
is what to show, `partial` says whether deltas were already shown; a retry with the same
`client_message_id` finishes the turn, and the partial text is never stored as the reply).

Errors that `handle` raises before a turn runs (bad text, an idempotency conflict, a busy
conversation) are raised from the iterator, as `handle` raises them.

A consumer that stops reading (the client went away) does not abandon the turn: it runs to
its end under its deadline, stores its reply and gives the lease back, so the user finds
the reply on return (and a retry with the same `client_message_id` replays it). With
`Orchestrator` it finishes in the background (awaited by `aclose`); with
`SyncOrchestrator` closing the iterator waits for it. Cancelling the consumer's task
(Ctrl-C, a server shutting down) cancels the turn, as cancelling `handle` would; its
message stays stored.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel

from frontdesk.errors import TurnFailed
from frontdesk.experts import NeedMoreInfo
from frontdesk.orchestrator import _listen
from frontdesk.orchestrator.reply import Reply


@dataclass(frozen=True, kw_only=True)
class Routed:
    """The turn's category, before any other model call's answer is shown."""

    type: Literal["routed"] = "routed"
    category: str
    routed_by: Literal["router", "triage"] = "triage"
    """What `Reply.routed_by` will say: `router` when no triage call was made."""


@dataclass(frozen=True, kw_only=True)
class Extracted:
    """The request expert's answer: the request, or what is still missing."""

    type: Literal["extracted"] = "extracted"
    request: BaseModel | None
    need_more_info: NeedMoreInfo | None


@dataclass(frozen=True, kw_only=True)
class Delta:
    """A piece of the reply's text."""

    type: Literal["delta"] = "delta"
    text: str


@dataclass(frozen=True, kw_only=True)
class Done:
    """The turn is answered and stored; `reply` is what `handle` returns."""

    type: Literal["done"] = "done"
    reply: Reply


@dataclass(frozen=True, kw_only=True)
class Failed:
    """The turn could not be answered; the user message is stored, no reply is."""

    type: Literal["failed"] = "failed"
    error: TurnFailed
    safe_reply: str
    """What to show the user instead (replacing any partial text shown)."""
    partial: bool
    """Whether `delta`s were shown before the failure."""


TurnEvent: TypeAlias = Routed | Extracted | Delta | Done | Failed
"""What `Orchestrator.stream` yields."""


@dataclass(frozen=True)
class _Raise:
    error: Exception


class _QueueListener:
    """Puts what the turn reports on the consumer's queue, until the consumer is gone."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[TurnEvent | _Raise] = asyncio.Queue()
        self.shown = False
        self.closed = False

    def put(self, item: TurnEvent | _Raise) -> None:
        if not self.closed:
            self.queue.put_nowait(item)

    def routed(self, category: str, by: Literal["router", "triage"]) -> None:
        self.put(Routed(category=category, routed_by=by))

    def extracted(self, request: BaseModel | None, need_more_info: NeedMoreInfo | None) -> None:
        self.put(Extracted(request=request, need_more_info=need_more_info))

    async def delta(self, text: str) -> None:
        self.shown = True
        self.put(Delta(text=text))


async def stream_turn(
    handle: Callable[[], Awaitable[Reply]],
    *,
    finish_in_background: Callable[[asyncio.Task[Any]], None] | None = None,
) -> AsyncGenerator[TurnEvent, None]:
    """The events of one turn (see the module docstring).

    Args:
        handle: Runs the turn: `Orchestrator.handle` with the message's arguments bound.
        finish_in_background: Takes the turn's task when the consumer stops early
            (`Orchestrator.finish_in_background`, which `aclose` waits for); `None` waits
            here for the turn to finish instead (`SyncOrchestrator`, whose loop only runs
            while it is called).
    """
    listener = _QueueListener()

    async def run() -> None:
        try:
            with _listen.listening(listener):
                reply = await handle()
        except TurnFailed as e:
            listener.put(Failed(error=e, safe_reply=e.safe_reply, partial=listener.shown))
        except Exception as e:  # raised to the consumer, as handle raises it
            listener.put(_Raise(e))
        else:
            if not listener.shown and reply.text:  # a replayed reply: its text in one piece
                listener.put(Delta(text=reply.text))
            listener.put(Done(reply=reply))
        finally:
            listener.closed = True

    task = asyncio.create_task(run())
    try:
        while True:
            item = await listener.queue.get()
            if isinstance(item, _Raise):
                raise item.error
            yield item
            if isinstance(item, Done | Failed):
                return
    except asyncio.CancelledError:
        # The consumer's own task was cancelled (Ctrl-C, a server shutting down): the turn
        # is cancelled with it, as cancelling `handle` would. A reader that only stops
        # iterating (`aclose`, a client gone) leaves the turn to finish, below.
        task.cancel()
        raise
    finally:
        listener.closed = True
        if not task.done():
            if finish_in_background is None:
                await asyncio.shield(task)
            else:
                finish_in_background(task)
