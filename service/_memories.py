"""`/v1/me/memories`: what is remembered about the caller (the token's `sub`) by the business
their token names (its `profile`; the default profile without), to see and to delete.
Another user's memory id, or another profile's, is answered 404, as a missing one."""

from __future__ import annotations

from fastapi import APIRouter

from frontdesk.memory import Memory
from frontdesk.service._deps import Caller, Orch, customer_profile
from frontdesk.service._schemas import (
    EVERY_ROUTE,
    DeletedOut,
    MemoriesOut,
    MemoryOut,
    error_responses,
)

router = APIRouter(prefix="/v1/me", tags=["memories"])

ERRORS = error_responses(
    EVERY_ROUTE, {404: "No such memory for this user.", 422: "An id that cannot be used."}
)


def memory_json(memory: Memory) -> MemoryOut:
    return MemoryOut(
        id=memory.id,
        text=memory.text,
        key=memory.key,
        source=memory.source,
        trust=memory.trust,
        conversation_id=memory.conversation_id,
        created_at=memory.created_at.isoformat(),
        updated_at=memory.updated_at.isoformat(),
    )


@router.get(
    "/memories",
    response_model=MemoriesOut,
    responses=ERRORS,
    summary="What is remembered about you (facts, then past conversations apart)",
)
async def list_memories(principal: Caller, orch: Orch) -> MemoriesOut:
    profile = customer_profile(orch, principal)
    facts = await orch.memory.recall(principal.user_id, profile=profile)
    past = await orch.memory.past_conversations(principal.user_id, profile=profile)
    return MemoriesOut(
        memories=[memory_json(m) for m in facts],
        past_conversations=[memory_json(m) for m in past],
    )


@router.delete(
    "/memories/{memory_id}", response_model=DeletedOut, responses=ERRORS, summary="Forget one fact"
)
async def delete_memory(memory_id: str, principal: Caller, orch: Orch) -> DeletedOut:
    profile = customer_profile(orch, principal)
    await orch.memory.forget(principal.user_id, memory_id, profile=profile)
    return DeletedOut(deleted=1)


@router.delete(
    "/memories", response_model=DeletedOut, responses=ERRORS, summary="Forget every fact"
)
async def delete_memories(principal: Caller, orch: Orch) -> DeletedOut:
    profile = customer_profile(orch, principal)
    return DeletedOut(deleted=await orch.memory.forget_all(principal.user_id, profile=profile))
