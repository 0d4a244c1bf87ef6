"""A turn's stream events as Server-Sent Events: `event: <type>` and one JSON `data:` line.

    event: routed     data: {"category": "ORDERS", "routed_by": "router" | "triage"}
    event: extracted  data: {"request": {...} | null, "need_more_info": {...} | null}
    event: delta      data: {"text": "Ok great, "}
    event: done       data: <the reply, as the JSON answer of the same POST>
    event: failed     data: {"text": <safe reply>, "partial": bool, "user_message_id", "stage"}

The orchestrator's stream is read by a task of its own, not by the response: a client that
goes away (its response is cancelled) leaves that task to finish the turn in the
orchestrator's background, so the reply is stored and a retry replays it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from frontdesk.orchestrator import Orchestrator, Reply, TurnEvent
from frontdesk.orchestrator.stream import Delta, Done, Extracted, Failed, Routed

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx: pass each event on as it comes
}


def reply_json(reply: Reply) -> dict[str, Any]:
    """The JSON answer of a turn (the SSE `done` event's data too)."""
    return {
        "text": reply.text,
        "category": reply.category,
        "routed_by": reply.routed_by,
        "request": reply.request.model_dump(mode="json") if reply.request else None,
        "need_more_info": reply.need_more_info.model_dump() if reply.need_more_info else None,
        "message_id": reply.message_id,
        "user_message_id": reply.user_message_id,
        "handoff": reply.handoff,
        "confirmation": reply.confirmation,
        "awaiting_confirmation": reply.awaiting_confirmation,
        "categories": list(reply.categories),
        "clarify": list(reply.clarify),
        "pending": reply.pending,
        "cancelled": reply.cancelled,
        "language": reply.language,
        "citations": [
            {"id": p.id, "source": p.source, "title": p.title, "version": p.version}
            for p in reply.citations
        ],
    }


def event_data(event: TurnEvent) -> dict[str, Any]:
    """The JSON `data:` of one stream event."""
    if isinstance(event, Routed):
        return {"category": event.category, "routed_by": event.routed_by}
    if isinstance(event, Extracted):
        return {
            "request": event.request.model_dump(mode="json") if event.request else None,
            "need_more_info": (event.need_more_info.model_dump() if event.need_more_info else None),
        }
    if isinstance(event, Delta):
        return {"text": event.text}
    if isinstance(event, Done):
        return reply_json(event.reply)
    assert isinstance(event, Failed)
    return {
        "text": event.safe_reply,
        "partial": event.partial,
        "user_message_id": event.error.user_message_id,
        "stage": event.error.stage,
    }


def encode(event: TurnEvent) -> bytes:
    """One SSE frame."""
    data = json.dumps(event_data(event), ensure_ascii=False, separators=(",", ":"))
    return f"event: {event.type}\ndata: {data}\n\n".encode()


class _End:
    pass


_END = _End()


async def open_stream(
    orchestrator: Orchestrator,
    conversation_id: str,
    text: str,
    *,
    user_id: str,
    client_message_id: str | None,
    profile: str | None = None,
    when_done: Callable[[], None] | None = None,
) -> AsyncIterator[bytes]:
    """Start the turn; return its frames once the first event is there.

    Errors raised before the turn runs (bad text, idempotency conflict, busy, not found)
    are raised here, so that they are answered with their HTTP status, not as a stream.
    `when_done` is called once the turn has ended, whether or not the client stayed (it
    gives the turn's admission place back).
    """
    queue: asyncio.Queue[TurnEvent | BaseException | _End] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in orchestrator.stream(
                conversation_id,
                text,
                user_id=user_id,
                client_message_id=client_message_id,
                profile=profile,
            ):
                queue.put_nowait(event)
        except Exception as e:
            queue.put_nowait(e)
        finally:
            queue.put_nowait(_END)

    task = asyncio.create_task(pump())
    if when_done is not None:  # Even for a task cancelled before it ran.
        task.add_done_callback(lambda _: when_done())
    orchestrator.finish_in_background(task)
    first = await queue.get()
    if isinstance(first, BaseException):
        raise first
    assert not isinstance(first, _End), "a stream ends with done or failed"

    async def frames() -> AsyncGenerator[bytes, None]:
        item: TurnEvent | BaseException | _End = first
        while True:
            if isinstance(item, _End):
                return
            if isinstance(item, BaseException):
                raise item
            yield encode(item)
            item = await queue.get()

    return frames()
