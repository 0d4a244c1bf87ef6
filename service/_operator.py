"""The operator routes: the hand-off queue, taking a conversation over, answering as a
person, handing back, and erasing a user; claiming a conversation and reading its context
(the operator desk). Each needs `"operator"` in the token's `roles`
(403 otherwise); the operator's id is the token's `sub`. A token with `profiles` (or
`queues`) sees and acts only on the conversations of those profiles (handed off for those
reasons): any other is 404, as a missing one. Erasing a user also needs `"privacy"`; an
operator's read of a customer's context is audited (`operator_read`)."""

from __future__ import annotations

from datetime import datetime

from fastapi import APIRouter

from frontdesk.orchestrator import Handoff
from frontdesk.service._deps import Operator, Orch, PrivacyOfficer, in_scope, profile_of
from frontdesk.service._ruled import shown_for
from frontdesk.service._schemas import (
    EVERY_ROUTE,
    WITH_BODY,
    ClaimOut,
    ContextFactOut,
    ContextOut,
    ContextTurnOut,
    ErasureOut,
    HandBackOut,
    HandoffIn,
    HandoffOut,
    HandoffsOut,
    OperatorMessageIn,
    OperatorMessageOut,
    error_responses,
)
from frontdesk.threads.desk import turn_outcomes

router = APIRouter(prefix="/v1", tags=["operator"])

ERRORS = error_responses(
    EVERY_ROUTE,
    WITH_BODY,
    {
        403: "The token has no `operator` role (erasure: no `privacy` role).",
        404: "No such conversation.",
        409: "No person has it, another operator has claimed it, or a turn holds it.",
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
        waiting_since=_iso(handoff.waiting_since),
        claimed_by=handoff.claimed_by,
        profile=handoff.profile,
    )


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


@router.get(
    "/handoffs",
    response_model=HandoffsOut,
    responses=ERRORS,
    summary="The conversations a person has, the longest-waiting user first",
)
async def list_handoffs(principal: Operator, orch: Orch) -> HandoffsOut:
    queue = await orch.handoffs.queue()
    return HandoffsOut(handoffs=[handoff_json(h) for h in queue if sees(principal, orch, h)])


def sees(principal: Operator, orch: Orch, handoff: Handoff) -> bool:
    """Whether the operator's token covers the hand-off's profile and queue."""
    return principal.sees(profile_of(orch, handoff.profile), handoff.reason)


@router.post(
    "/conversations/{conversation_id}/handoff",
    response_model=HandoffOut,
    responses=ERRORS,
    summary="Take a conversation over: the bot stops answering it",
)
async def open_handoff(
    conversation_id: str, principal: Operator, orch: Orch, body: HandoffIn | None = None
) -> HandoffOut:
    await in_scope(orch, principal, conversation_id)
    reason = (
        body.reason if body is not None and body.reason else f"taken over by {principal.user_id}"
    )
    return handoff_json(await orch.handoffs.open(conversation_id, reason))


@router.post(
    "/conversations/{conversation_id}/claim",
    response_model=ClaimOut,
    responses=ERRORS,
    summary="Claim a handed-off conversation: only the claimant may answer it",
)
async def claim(conversation_id: str, principal: Operator, orch: Orch) -> ClaimOut:
    """A claim on a conversation another operator has takes it over (audited as a
    transfer); claiming one's own again changes nothing."""
    await in_scope(orch, principal, conversation_id)
    claimed = await orch.handoffs.claim(conversation_id, operator_id=principal.user_id)
    return ClaimOut(
        conversation_id=conversation_id,
        claimed_by=principal.user_id,
        previous=claimed.previous,
    )


@router.get(
    "/conversations/{conversation_id}/context",
    response_model=ContextOut,
    responses=ERRORS,
    summary="What an operator reads before answering: summary, memories, each turn",
)
async def context(conversation_id: str, principal: Operator, orch: Orch) -> ContextOut:
    conversation = await in_scope(orch, principal, conversation_id)
    owner = conversation.user_id
    if owner is not None:  # Who read the customer's data, and when: in their own chain.
        what = ["context", "transcript", "memories"]
        await orch.privacy.record_access(
            owner, by=f"operator:{principal.user_id}", what=what, conversation_id=conversation_id
        )
    thread = await orch.user_thread(conversation_id, user_id=owner)
    profile = profile_of(orch, conversation.profile)
    facts = [] if owner is None else await orch.memory.recall(owner, profile=profile)
    messages = await orch.transcript(conversation_id, user_id=owner)
    outcomes = await turn_outcomes(orch.store.engine, conversation_id)
    shown = await shown_for(orch, conversation_id)
    turns = []
    for m in messages:
        if m.role != "user":
            continue
        o = outcomes.get(m.id)
        turns.append(
            ContextTurnOut(
                user_message_id=m.id,
                text=shown.text(m.content),
                category=None if o is None else o.category,
                request=None if o is None else shown.value(o.request),
                need_more_info=None if o is None else o.need_more_info,
                instruction=None if o is None else shown.text(o.instruction),
            )
        )
    return ContextOut(
        conversation_id=conversation_id,
        user_id=owner,
        summary=None if thread.summary is None else shown.text(thread.summary),
        memories=[shown.text(f.text) for f in facts],
        facts=[
            ContextFactOut(id=f.id, text=shown.text(f.text), key=f.key, trust=f.trust)
            for f in facts
        ],
        turns=turns,
    )


@router.post(
    "/conversations/{conversation_id}/operator-messages",
    response_model=OperatorMessageOut,
    responses=ERRORS,
    summary="Answer the user as a person (an assistant turn authored by the operator)",
)
async def post_operator_message(
    conversation_id: str, body: OperatorMessageIn, principal: Operator, orch: Orch
) -> OperatorMessageOut:
    await in_scope(orch, principal, conversation_id)
    message_id = await orch.handoffs.reply(
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
    await in_scope(orch, principal, conversation_id)
    await orch.handoffs.hand_back(conversation_id, operator_id=principal.user_id)
    return HandBackOut(conversation_id=conversation_id, handoff=False)


@router.post(
    "/users/{user_id:path}/erase",
    response_model=ErasureOut,
    responses=ERRORS,
    summary="Erase everything stored about a user (docs/privacy.md)",
)
async def erase_user(user_id: str, principal: PrivacyOfficer, orch: Orch) -> ErasureOut:
    """Idempotent: a second call finishes an interrupted erasure and counts what it changed.
    A user id may hold `/` (`tenant/alice`, or `tenant%2Falice`). Needs the `privacy` role."""
    report = await orch.privacy.erase_user(user_id, requested_by=f"operator:{principal.user_id}")
    return ErasureOut(user_id=user_id, **report.counts())
