"""The `/v1` routes a customer's client calls: messages (JSON or SSE), thread, transcript,
edit and regenerate, the conversation's state and a rating of an answer.

The user is always the token's `sub`; a conversation of another user is answered as a
missing one (404). Operators may read any conversation's thread and transcript.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, HTTPException, Request
from fastapi.responses import StreamingResponse

from frontdesk.errors import ConversationNotFound, MessageNotFound
from frontdesk.orchestrator import Orchestrator
from frontdesk.service._auth import Principal
from frontdesk.service._deps import Caller, Orch, Parts, customer_profile, in_scope
from frontdesk.service._reveal import revealed
from frontdesk.service._ruled import Shown, shown_for
from frontdesk.service._schemas import (
    EVERY_ROUTE,
    WITH_BODY,
    ConversationOut,
    ConversationStateOut,
    FeedbackIn,
    FeedbackOut,
    MessageIn,
    ReplyOut,
    ThreadMessageOut,
    ThreadOut,
    TranscriptMessageOut,
    TranscriptOut,
    error_responses,
)
from frontdesk.service._sse import SSE_HEADERS, open_stream, reply_json

router = APIRouter(prefix="/v1")

ERRORS = error_responses(
    EVERY_ROUTE,
    WITH_BODY,
    {
        404: "No such conversation or message for this user.",
        422: "Text or an id that cannot be used.",
    },
)
TURN_ERRORS = ERRORS | error_responses(
    {
        409: "Busy, or an Idempotency-Key reused.",
        428: "No Idempotency-Key: a retry could run the turn's handler twice.",
        503: "The turn failed (`detail` is the safe reply; the message is stored), or"
        " `ServiceBusy`: too many turns at once, not started, nothing stored; send it again"
        " with the same Idempotency-Key after Retry-After.",
    }
)
SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The reply; with `Accept: text/event-stream`, the turn's events.",
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
}

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="The client's id for this message: a retry with it is answered once.",
    ),
]


AGENT = "Agent"
"""What a customer sees as the author of an operator's message (never `operator:<sub>`)."""
CONVERSATION_ID_BYTES = 18
"""A server-made conversation id's randomness: 144 bits, unguessable."""


def _shown_author(author: str, principal: Principal) -> str:
    if principal.is_operator or not author.startswith("operator:"):
        return author
    return AGENT


def _wants_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "").lower()


async def _reader(
    orch: Orchestrator, conversation_id: str, principal: Principal, what: str
) -> str | None:
    """The user id to read a conversation as: the caller's, or the owner's for an operator."""
    if not principal.is_operator:
        return principal.user_id
    conversation = await in_scope(orch, principal, conversation_id)
    if conversation.user_id is not None:  # An operator's read is audited (who, when, what).
        await orch.privacy.record_access(
            conversation.user_id,
            by=f"operator:{principal.user_id}",
            what=[what],
            conversation_id=conversation_id,
        )
    return conversation.user_id


async def _message_in(orch: Orchestrator, conversation_id: str, message_id: str) -> None:
    """Refuse a message id that is not in the conversation named by the path (404)."""
    try:
        message = await orch.store.get(message_id)
    except MessageNotFound:
        message = None
    if message is None or message.conversation_id != conversation_id:
        raise ConversationNotFound(
            f"no message {message_id!r} in conversation {conversation_id!r}",
            conversation_id=conversation_id,
            message_id=message_id,
        )


@router.post(
    "/conversations",
    response_model=ConversationOut,
    status_code=201,
    responses=ERRORS,
    summary="Start a conversation: a new, unguessable id owned by the caller",
)
async def post_conversation(principal: Caller, orch: Orch) -> ConversationOut:
    """The server makes the id (a client cannot take one first, nor learn whether another
    user's exists); the body, if any, is an empty JSON object."""
    conversation_id = "cv_" + secrets.token_urlsafe(CONVERSATION_ID_BYTES)
    profile = customer_profile(orch, principal) or next(iter(orch.profiles))
    await orch.store.create_conversation(
        conversation_id, user_id=principal.user_id, profile=profile
    )
    return ConversationOut(conversation_id=conversation_id)


@router.post(
    "/conversations/{conversation_id}/messages",
    response_model=ReplyOut,
    responses={**TURN_ERRORS, **SSE_RESPONSE},
    summary="Send a user message; the reply as JSON, or as SSE events",
)
async def post_message(
    conversation_id: str,
    body: MessageIn,
    request: Request,
    principal: Caller,
    orch: Orch,
    parts: Parts,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Answer one message in a conversation `POST /v1/conversations` made for the caller
    (with `--allow-client-conversation-ids`, a first message creates it). With
    `Accept: text/event-stream` the answer is the turn's events (`routed`, `extracted`,
    `delta`..., `done` or `failed`), each `data:` JSON."""
    if idempotency_key is None and not parts.allow_missing_idempotency_key:
        raise HTTPException(
            status_code=428,
            detail="send an Idempotency-Key header (one per message, the same on a retry): "
            "without it a retry would run the turn, and its handler, again",
        )
    streaming = _wants_stream(request)
    gate = await parts.turn_gate()
    await gate.admit("stream" if streaming else "json")  # Else 503: nothing is stored.
    release: Callable[[], None] | None = gate.release
    try:
        profile = customer_profile(orch, principal)
        if not parts.allow_client_conversation_ids:
            await orch.store.check_owner(conversation_id, principal.user_id)
        if streaming:
            release, when_done = None, release  # The turn's own task gives the place back.
            frames = await open_stream(
                orch,
                conversation_id,
                body.text,
                user_id=principal.user_id,
                client_message_id=idempotency_key,
                profile=profile,
                when_done=when_done,
            )
            return StreamingResponse(frames, media_type="text/event-stream", headers=SSE_HEADERS)
        reply = await orch.handle(
            conversation_id,
            body.text,
            user_id=principal.user_id,
            client_message_id=idempotency_key,
            profile=profile,
        )
        return reply_json(reply)
    finally:
        if release is not None:
            release()


@router.get(
    "/conversations/{conversation_id}/thread",
    response_model=ThreadOut,
    responses=ERRORS,
    summary="The user thread: what the experts are sent next",
)
async def get_thread(conversation_id: str, principal: Caller, orch: Orch) -> ThreadOut:
    user_id = await _reader(orch, conversation_id, principal, "thread")
    thread = await orch.user_thread(conversation_id, user_id=user_id)
    shown = await shown_for(orch, conversation_id)
    return ThreadOut(
        summary=None if thread.summary is None else shown.text(thread.summary),
        messages=[
            ThreadMessageOut(role=m.role, content=shown.text(m.content)) for m in thread.messages
        ],
    )


@router.get(
    "/conversations/{conversation_id}/transcript",
    response_model=TranscriptOut,
    responses=ERRORS,
    summary="Every message of the active path, with its author",
)
async def get_transcript(
    conversation_id: str, principal: Caller, orch: Orch, reveal: bool = False
) -> TranscriptOut:
    """`reveal=true` (an operator with the `reveal` role): user messages with their ruled
    values in clear, from the audit log, the showing audited (`service/_reveal.py`)."""
    user_id = await _reader(orch, conversation_id, principal, "transcript")
    messages = await orch.transcript(conversation_id, user_id=user_id)
    shown = await shown_for(orch, conversation_id)
    if reveal:
        if not principal.is_operator:
            raise HTTPException(status_code=403, detail="reveal=true is for operators")
        clear = await revealed(orch, principal, conversation_id, "transcript")
        shown = Shown()
        messages = [
            dataclasses.replace(m, content=clear.text(m.id, m.content)) if m.role == "user" else m
            for m in messages
        ]
    return TranscriptOut(
        messages=[
            TranscriptMessageOut(
                id=m.id,
                parent_id=m.parent_id,
                role=m.role,
                content=shown.text(m.content),
                author=_shown_author(m.author, principal),
                created_at=m.created_at.isoformat(),
                failed=m.failed,
                kind=m.kind,
            )
            for m in messages
        ],
        handoff=await orch.store.handoffs.current(conversation_id) is not None,
    )


@router.post(
    "/conversations/{conversation_id}/messages/{message_id}/edit",
    response_model=ReplyOut,
    responses=TURN_ERRORS,
    summary="Answer an edited user message (a new branch)",
)
async def edit_message(
    conversation_id: str,
    message_id: str,
    body: MessageIn,
    principal: Caller,
    orch: Orch,
    parts: Parts,
) -> dict[str, Any]:
    await _message_in(orch, conversation_id, message_id)
    profile = customer_profile(orch, principal)
    async with (await parts.turn_gate()).place("edit"):
        reply = await orch.edit(message_id, body.text, user_id=principal.user_id, profile=profile)
    return reply_json(reply)


@router.post(
    "/conversations/{conversation_id}/messages/{message_id}/regenerate",
    response_model=ReplyOut,
    responses=TURN_ERRORS,
    summary="Answer the same user message again (a sibling answer)",
)
async def regenerate_message(
    conversation_id: str, message_id: str, principal: Caller, orch: Orch, parts: Parts
) -> dict[str, Any]:
    await _message_in(orch, conversation_id, message_id)
    profile = customer_profile(orch, principal)
    async with (await parts.turn_gate()).place("regenerate"):
        reply = await orch.regenerate(message_id, user_id=principal.user_id, profile=profile)
    return reply_json(reply)


@router.get(
    "/conversations/{conversation_id}",
    response_model=ConversationStateOut,
    responses=ERRORS,
    summary="The conversation's state: its resolution, when and by whom",
)
async def get_conversation(
    conversation_id: str, principal: Caller, orch: Orch
) -> ConversationStateOut:
    user_id = await _reader(orch, conversation_id, principal, "state")
    conv = await orch.conversation(conversation_id, user_id=user_id)
    return ConversationStateOut(
        conversation_id=conv.id,
        created_at=conv.created_at.isoformat(),
        resolution=conv.resolution,
        resolved_at=None if conv.resolved_at is None else conv.resolved_at.isoformat(),
        resolved_by=conv.resolved_by,
    )


@router.post(
    "/conversations/{conversation_id}/messages/{message_id}/feedback",
    response_model=FeedbackOut,
    responses=ERRORS,
    summary="Rate a bot answer (1-5, thumbs as 1 or 5), with an optional comment",
)
async def post_feedback(
    conversation_id: str, message_id: str, body: FeedbackIn, principal: Caller, orch: Orch
) -> FeedbackOut:
    """Only the conversation's own customer may rate its answers (404 for anyone else's);
    a repeated rating replaces the last. A rating of 4 or 5 resolves the conversation."""
    await _message_in(orch, conversation_id, message_id)
    fb = await orch.feedback(
        message_id, body.rating, user_id=principal.user_id, comment=body.comment
    )
    return FeedbackOut(
        message_id=fb.message_id, rating=fb.rating, comment=fb.comment, resolved=fb.resolved
    )
