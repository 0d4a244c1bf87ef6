"""Live events: a conversation's new messages and hand-off changes, and the operators'
queue, as Server-Sent Events (`GET /v1/conversations/{cid}/events`,
`GET /v1/handoffs/events`).

Each event is one frame: an `id:` line (resume with `Last-Event-ID`) and one `data:` line
of JSON with a `type`:

    {"type": "message", "id", "author", "role", "text", "time", "parent_id", "kind", ...}
    {"type": "message_removed", "id"}      a waiting message an operator's answer replaced
    {"type": "handoff", "state": "opened" | "claimed" | "answered" | "handed_back"
                                 | "timed_out", "time", ...}
    {"type": "queue_position", "position", "waiting_since"}   (the customer's place)
    {"type": "queue", "handoffs": [...], "changes": [...]}    (`/v1/handoffs/events`)

The streams poll the store (`threads.events.change_mark`, one cheap read per poll; the
transcript is read again only when it changed), so a write by any worker of `frontdesk
serve --workers N` reaches every client, on SQLite and PostgreSQL alike. Event ids sort
by time: `<microseconds since the epoch, 16 digits>-<what>`. A client that reconnects with
`Last-Event-ID` gets every event after that one; without it, the conversation from its
first message. A comment line every `keepalive` seconds keeps proxies from closing an
idle stream; after `max_age` seconds the server ends it and the client reconnects.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import StreamingResponse

from frontdesk.orchestrator import Handoff, Orchestrator
from frontdesk.service._auth import Principal
from frontdesk.service._deps import Caller, Operator, Orch, in_scope, profile_of
from frontdesk.service._operator import handoff_json
from frontdesk.service._schemas import EVERY_ROUTE, error_responses
from frontdesk.service._sse import SSE_HEADERS
from frontdesk.threads.desk import ChangeMark, change_mark, queue_mark
from frontdesk.threads.handoff import HandoffRecord
from frontdesk.threads.models import utcnow
from frontdesk.threads.store import MessageRecord

router = APIRouter(prefix="/v1", tags=["events"])

ERRORS = error_responses(
    EVERY_ROUTE,
    {
        403: "The queue's events need the `operator` role.",
        404: "No such conversation for this user.",
    },
)
EVENTS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events, each a `data:` line of JSON with a `type`.",
        "content": {
            "text/event-stream": {
                "schema": {  # one SSE event: `data` is JSON with a `type`
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "data": {"type": "string", "contentMediaType": "application/json"},
                    },
                }
            }
        },
    }
}

LastEventId = Annotated[
    str | None,
    Header(alias="Last-Event-ID", description="Resume after this event (the SSE standard)."),
]

AGENT = "agent"
"""How a customer sees a person's messages: never the operator's internal id."""


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """How often the streams poll the store, how long they stay silent at most, and how
    long one stays open: then it ends, and the client reconnects with Last-Event-ID (its
    token is checked again, and the new stream may go to another worker)."""

    poll: float = 0.5
    keepalive: float = 15.0
    max_age: float = 300.0


@dataclass(frozen=True, slots=True)
class Event:
    id: str
    data: dict[str, Any]

    def frame(self) -> str:
        return f"id: {self.id}\ndata: {json.dumps(self.data, separators=(',', ':'))}\n\n"


def _micros(at: datetime) -> str:
    return f"{int(at.timestamp() * 1_000_000):016d}"


def _author(m: MessageRecord, operator_view: bool) -> str:
    if m.author.startswith("operator:") and not operator_view:
        return AGENT
    return m.author


def message_event(m: MessageRecord, operator_view: bool) -> Event:
    """A message of the active path, as its stream shows it to this reader."""
    return Event(
        f"{_micros(m.created_at)}-m-{m.id}",
        {
            "type": "message",
            "id": m.id,
            "author": _author(m, operator_view),
            "role": m.role,
            "text": m.content,
            "time": m.created_at.isoformat(),
            "parent_id": m.parent_id,
            "kind": m.kind,
            "failed": m.failed,
        },
    )


def handoff_events(record: HandoffRecord, operator_view: bool) -> list[Event]:
    """The changes one hand-off went through, as far as its row keeps them."""

    def event(state: str, at: datetime, **extra: Any) -> Event:
        data = {"type": "handoff", "state": state, "time": at.isoformat(), **extra}
        return Event(f"{_micros(at)}-h-{record.id}-{state}", data)

    opened: dict[str, Any] = {"reason": record.reason} if operator_view else {}
    out = [event("opened", record.opened_at, **opened)]
    if record.claimed_at is not None and record.claimed_by is not None:
        by = record.claimed_by if operator_view else AGENT
        out.append(event("claimed", record.claimed_at, claimed_by=by))
    if record.closed_at is not None:
        state = "timed_out" if record.closed_by == "timeout" else "handed_back"
        out.append(event(state, record.closed_at))
    return out


async def conversation_events(
    orch: Orchestrator, conversation_id: str, user_id: str | None, operator_view: bool
) -> tuple[list[Event], set[str]]:
    """Every event the conversation's stream holds now, in id order, and the ids of the
    messages on its active path."""
    messages = await orch.transcript(conversation_id, user_id=user_id)
    history = await orch.store.handoffs.history(conversation_id)
    events = [message_event(m, operator_view) for m in messages]
    for m in messages:
        if m.author.startswith("operator:"):
            events.append(
                Event(
                    f"{_micros(m.created_at)}-a-{m.id}",
                    {"type": "handoff", "state": "answered", "time": m.created_at.isoformat()},
                )
            )
    for record in history:
        events.extend(handoff_events(record, operator_view))
    events.sort(key=lambda e: e.id)
    return events, {m.id for m in messages}


async def _owner(orch: Orchestrator, conversation_id: str, principal: Principal) -> str | None:
    """The user id to read as (404 for a conversation that is not the caller's)."""
    if not principal.is_operator:
        await orch.store.check_owner(conversation_id, principal.user_id)
        return principal.user_id
    conversation = await in_scope(orch, principal, conversation_id)
    return conversation.user_id


async def _conversation_frames(
    request: Request,
    orch: Orchestrator,
    conversation_id: str,
    user_id: str | None,
    operator_view: bool,
    after: str | None,
    timing: StreamTiming,
) -> AsyncIterator[str]:
    yield "retry: 1000\n\n"
    sent: set[str] = set()
    shown: set[str] = set()
    mark: ChangeMark | None = None
    first = True
    quiet_since = opened = time.monotonic()
    while not await request.is_disconnected() and time.monotonic() - opened < timing.max_age:
        now = await change_mark(orch.store.engine, conversation_id)
        if not now.exists:
            return  # erased while followed
        if now != mark:
            events, on_path = await conversation_events(
                orch, conversation_id, user_id, operator_view
            )
            out: list[Event] = []
            for e in events:
                if e.id in sent:
                    continue
                sent.add(e.id)
                if first and after is not None and e.id <= after:
                    continue  # the client had it before it reconnected
                out.append(e)
            for gone in sorted(shown - on_path):
                stamp = _micros(utcnow())
                out.append(Event(f"{stamp}-r-{gone}", {"type": "message_removed", "id": gone}))
            if now.queue_position != (mark.queue_position if mark else None) or (
                first and now.queue_position is not None
            ):
                out.append(
                    Event(
                        f"{_micros(utcnow())}-p-{now.queue_position}",
                        {"type": "queue_position", "position": now.queue_position},
                    )
                )
            shown = on_path
            mark, first = now, False
            for e in out:
                yield e.frame()
            if out:
                quiet_since = time.monotonic()
        if time.monotonic() - quiet_since >= timing.keepalive:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(timing.poll)


def _queue_id(handoffs: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256(json.dumps(handoffs, sort_keys=True).encode()).hexdigest()[:16]
    return f"{_micros(utcnow())}-q-{digest}"


async def _queue_frames(
    request: Request,
    orch: Orchestrator,
    principal: Principal,
    after: str | None,
    timing: StreamTiming,
) -> AsyncIterator[str]:
    yield "retry: 1000\n\n"
    store = orch.store.handoffs
    mark: object = None
    before: dict[str, dict[str, Any]] = {}
    last_digest = after.rsplit("-", 1)[-1] if after else None
    quiet_since = opened = time.monotonic()
    expired_at = 0.0
    while not await request.is_disconnected() and time.monotonic() - opened < timing.max_age:
        if orch.handoff_policy.timeout is not None and time.monotonic() - expired_at > 5.0:
            await orch.handoffs()  # hands back the timed-out ones (their streams show it)
            expired_at = time.monotonic()
        now_mark = await queue_mark(orch.store.engine)
        if now_mark != mark:
            mark = now_mark
            at = utcnow()
            items = [
                handoff_json(Handoff.of(h, at)).model_dump()
                for h in await store.open_ones()
                if principal.sees(profile_of(orch, h.profile), h.reason)
            ]
            stable = [{k: v for k, v in h.items() if k != "waiting_seconds"} for h in items]
            event_id = _queue_id(stable)
            digest = event_id.rsplit("-", 1)[-1]
            if digest != last_digest:
                current = {h["conversation_id"]: h for h in items}
                changes = _changes(before, current)
                before, last_digest = current, digest
                data = {"type": "queue", "handoffs": items, "changes": changes}
                yield Event(event_id, data).frame()
                quiet_since = time.monotonic()
            else:
                before = {h["conversation_id"]: h for h in items}
        if time.monotonic() - quiet_since >= timing.keepalive:
            yield ": keep-alive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(timing.poll)


def _changes(
    before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """What moved in the queue: `queued`, `claimed` (by whom), `answered`, `waiting`,
    `closed` (handed back or timed out)."""
    out: list[dict[str, Any]] = []
    for cid, h in after.items():
        old = before.get(cid)
        if old is None:
            out.append({"conversation_id": cid, "change": "queued"})
            continue
        if old.get("claimed_by") != h.get("claimed_by"):
            out.append(
                {"conversation_id": cid, "change": "claimed", "claimed_by": h.get("claimed_by")}
            )
        if (old.get("waiting_since") is None) != (h.get("waiting_since") is None):
            change = "answered" if h.get("waiting_since") is None else "waiting"
            out.append({"conversation_id": cid, "change": change})
    out.extend({"conversation_id": cid, "change": "closed"} for cid in before if cid not in after)
    return out


def _timing(request: Request) -> StreamTiming:
    timing = getattr(request.app.state, "event_timing", None)
    return timing if isinstance(timing, StreamTiming) else StreamTiming()


@router.get(
    "/conversations/{conversation_id}/events",
    responses={**ERRORS, **EVENTS_RESPONSE},
    summary="The conversation's new messages and hand-off changes, live (SSE)",
)
async def conversation_stream(
    conversation_id: str,
    request: Request,
    principal: Caller,
    orch: Orch,
    last_event_id: LastEventId = None,
) -> StreamingResponse:
    """A customer may follow their own conversations (another's is 404, as a missing one);
    an operator any."""
    user_id = await _owner(orch, conversation_id, principal)
    frames = _conversation_frames(
        request,
        orch,
        conversation_id,
        user_id,
        principal.is_operator,
        last_event_id,
        _timing(request),
    )
    return StreamingResponse(frames, media_type="text/event-stream", headers=SSE_HEADERS)


@router.get(
    "/handoffs/events",
    responses={**ERRORS, **EVENTS_RESPONSE},
    summary="The queue of hand-offs, live (SSE): a snapshot each time it changes",
)
async def queue_stream(
    request: Request, principal: Operator, orch: Orch, last_event_id: LastEventId = None
) -> StreamingResponse:
    return StreamingResponse(
        _queue_frames(request, orch, principal, last_event_id, _timing(request)),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )
