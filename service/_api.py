"""The `/v1` routes a customer's client calls: messages (JSON or SSE), thread, transcript,
edit and regenerate.

The user is always the token's `sub`; a conversation of another user is answered as a
missing one (404). Operators may read any conversation's thread and transcript.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import StreamingResponse

from frontdesk.errors import ConversationNotFound, MessageNotFound
from frontdesk.orchestrator import Orchestrator
from frontdesk.service._auth import Principal
from frontdesk.service._deps import Caller, Orch
from frontdesk.service._schemas import (
    EVERY_ROUTE,
    WITH_BODY,
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
        503: "The turn failed; `detail` is the safe reply.",
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


def _wants_stream(request: Request) -> bool:
    return "text/event-stream" in request.headers.get("accept", "").lower()


async def _reader(orch: Orchestrator, conversation_id: str, principal: Principal) -> str | None:
    """The user id to read a conversation as: the caller's, or the owner's for an operator."""
    if not principal.is_operator:
        return principal.user_id
    conversation = await orch.store.conversation(conversation_id)
    if conversation is None:
        raise ConversationNotFound(
            f"no conversation {conversation_id!r}", conversation_id=conversation_id
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
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Answer one message. A conversation is created by its first message and belongs to
    the caller from then on. With `Accept: text/event-stream` the answer is the turn's
    events (`routed`, `extracted`, `delta`..., `done` or `failed`), each `data:` JSON."""
    if _wants_stream(request):
        frames = await open_stream(
            orch,
            conversation_id,
            body.text,
            user_id=principal.user_id,
            client_message_id=idempotency_key,
        )
        return StreamingResponse(frames, media_type="text/event-stream", headers=SSE_HEADERS)
    reply = await orch.handle(
        conversation_id,
        body.text,
        user_id=principal.user_id,
        client_message_id=idempotency_key,
    )
    return reply_json(reply)


@router.get(
    "/conversations/{conversation_id}/thread",
    response_model=ThreadOut,
    responses=ERRORS,
    summary="The user thread: what the experts are sent next",
)
async def get_thread(conversation_id: str, principal: Caller, orch: Orch) -> ThreadOut:
    user_id = await _reader(orch, conversation_id, principal)
    thread = await orch.user_thread(conversation_id, user_id=user_id)
    return ThreadOut(
        summary=thread.summary,
        messages=[ThreadMessageOut(role=m.role, content=m.content) for m in thread.messages],
    )


@router.get(
    "/conversations/{conversation_id}/transcript",
    response_model=TranscriptOut,
    responses=ERRORS,
    summary="Every message of the active path, with its author",
)
async def get_transcript(conversation_id: str, principal: Caller, orch: Orch) -> TranscriptOut:
    user_id = await _reader(orch, conversation_id, principal)
    messages = await orch.transcript(conversation_id, user_id=user_id)
    return TranscriptOut(
        messages=[
            TranscriptMessageOut(
                id=m.id,
                parent_id=m.parent_id,
                role=m.role,
                content=m.content,
                author=m.author,
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
    conversation_id: str, message_id: str, body: MessageIn, principal: Caller, orch: Orch
) -> dict[str, Any]:
    await _message_in(orch, conversation_id, message_id)
    reply = await orch.edit(message_id, body.text, user_id=principal.user_id)
    return reply_json(reply)


@router.post(
    "/conversations/{conversation_id}/messages/{message_id}/regenerate",
    response_model=ReplyOut,
    responses=TURN_ERRORS,
    summary="Answer the same user message again (a sibling answer)",
)
async def regenerate_message(
    conversation_id: str, message_id: str, principal: Caller, orch: Orch
) -> dict[str, Any]:
    await _message_in(orch, conversation_id, message_id)
    reply = await orch.regenerate(message_id, user_id=principal.user_id)
    return reply_json(reply)
