"""The operator routes: the hand-off queue, taking a conversation over, answering as a
person, handing back, and erasing a user. Each needs `"operator"` in the token's `roles`
(403 otherwise); the operator's id is the token's `sub`."""

from __future__ import annotations

from fastapi import APIRouter

from frontdesk.orchestrator import Handoff
from frontdesk.service._deps import Operator, Orch
from frontdesk.service._schemas import (
    EVERY_ROUTE,
    WITH_BODY,
    ErasureOut,
    HandBackOut,
    HandoffIn,
    HandoffOut,
    HandoffsOut,
    OperatorMessageIn,
    OperatorMessageOut,
    error_responses,
)

router = APIRouter(prefix="/v1", tags=["operator"])

ERRORS = error_responses(
    EVERY_ROUTE,
    WITH_BODY,
    {
        403: "The token has no `operator` role.",
        404: "No such conversation.",
        409: "No person has it, or a turn holds it.",
        422: "Text or an id that cannot be used.",
    },
)


def handoff_json(handoff: Handoff) -> HandoffOut:
    return HandoffOut(
        conversation_id=handoff.conversation_id,
        user_id=handoff.user_id,
        reason=handoff.reason,
        opened_at=handoff.opened_at.isoformat(),
        waiting_seconds=handoff.waiting_seconds,
    )


@router.get(
    "/handoffs",
    response_model=HandoffsOut,
    responses=ERRORS,
    summary="The conversations a person has, the longest-waiting user first",
)
async def list_handoffs(principal: Operator, orch: Orch) -> HandoffsOut:
    return HandoffsOut(handoffs=[handoff_json(h) for h in await orch.handoffs()])


@router.post(
    "/conversations/{conversation_id}/handoff",
    response_model=HandoffOut,
    responses=ERRORS,
    summary="Take a conversation over: the bot stops answering it",
)
async def open_handoff(
    conversation_id: str, principal: Operator, orch: Orch, body: HandoffIn | None = None
) -> HandoffOut:
    reason = (
        body.reason if body is not None and body.reason else f"taken over by {principal.user_id}"
    )
    return handoff_json(await orch.hand_off(conversation_id, reason))


@router.post(
    "/conversations/{conversation_id}/operator-messages",
    response_model=OperatorMessageOut,
    responses=ERRORS,
    summary="Answer the user as a person (an assistant turn authored by the operator)",
)
async def post_operator_message(
    conversation_id: str, body: OperatorMessageIn, principal: Operator, orch: Orch
) -> OperatorMessageOut:
    message_id = await orch.operator_reply(
        conversation_id, body.text, operator_id=principal.user_id
    )
    return OperatorMessageOut(message_id=message_id, author=f"operator:{principal.user_id}")


@router.post(
    "/conversations/{conversation_id}/hand-back",
    response_model=HandBackOut,
    responses=ERRORS,
    summary="Give the conversation back to the bot",
)
async def post_hand_back(conversation_id: str, principal: Operator, orch: Orch) -> HandBackOut:
    await orch.hand_back(conversation_id)
    return HandBackOut(conversation_id=conversation_id, handoff=False)


@router.post(
    "/users/{user_id:path}/erase",
    response_model=ErasureOut,
    responses=ERRORS,
    summary="Erase everything stored about a user (docs/privacy.md)",
)
async def erase_user(user_id: str, principal: Operator, orch: Orch) -> ErasureOut:
    """Idempotent: a second call finishes an interrupted erasure and counts what it changed.
    A user id may hold `/` (`tenant/alice`, or `tenant%2Falice`)."""
    report = await orch.erase_user(user_id, requested_by=f"operator:{principal.user_id}")
    return ErasureOut(user_id=user_id, **report.counts())
