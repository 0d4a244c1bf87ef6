"""Leases and the conversation lock: exclusive across owners, expiring, released on error."""

from __future__ import annotations

import time
import uuid

import anyio
import pytest

from frontdesk.errors import ConversationBusy
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


def name() -> str:
    return f"compact:conv-{uuid.uuid4().hex[:12]}"


async def test_a_lease_has_one_owner_until_released(store: ConversationStore) -> None:
    lease = name()
    assert await store.try_lease(lease, "a", ttl=30)
    assert not await store.try_lease(lease, "b", ttl=30)
    assert await store.try_lease(lease, "a", ttl=30)  # The holder renews.
    await store.release_lease(lease, "b")  # Not the holder: nothing happens.
    assert not await store.try_lease(lease, "b", ttl=30)
    await store.release_lease(lease, "a")
    assert await store.try_lease(lease, "b", ttl=30)


async def test_an_expired_lease_can_be_taken_over(store: ConversationStore) -> None:
    lease = name()
    assert await store.try_lease(lease, "crashed", ttl=0.2)
    assert not await store.try_lease(lease, "b", ttl=30)
    await anyio.sleep(0.3)
    assert await store.try_lease(lease, "b", ttl=30)
    assert not await store.try_lease(lease, "crashed", ttl=30)


async def test_a_busy_conversation_times_out_with_a_retryable_error(
    store: ConversationStore,
) -> None:
    conv = f"conv-{uuid.uuid4().hex[:12]}"
    async with store.conversation_lock(conv):
        started = time.monotonic()
        with pytest.raises(ConversationBusy) as caught:
            async with store.conversation_lock(conv, timeout=0.3):
                pytest.fail("the lock was taken twice")
    assert 0.3 <= time.monotonic() - started < 2
    assert caught.value.retryable
    assert caught.value.conversation_id == conv
    async with store.conversation_lock(conv, timeout=0.3):
        pass  # Released on exit: free again.


async def test_the_lock_is_released_when_the_turn_fails(store: ConversationStore) -> None:
    conv = f"conv-{uuid.uuid4().hex[:12]}"
    with pytest.raises(RuntimeError):
        async with store.conversation_lock(conv):
            raise RuntimeError("model failed")
    async with store.conversation_lock(conv, timeout=0.3):
        pass


async def test_a_crashed_holder_is_waited_out(store: ConversationStore) -> None:
    conv = f"conv-{uuid.uuid4().hex[:12]}"
    # A holder that crashed leaves its row behind and never renews it.
    assert await store.try_lease(f"conversation:{conv}", "crashed-process", ttl=0.3)
    started = time.monotonic()
    async with store.conversation_lock(conv, timeout=5):
        waited = time.monotonic() - started
    assert 0.2 <= waited < 2


async def test_a_held_lock_is_renewed_past_its_ttl(store: ConversationStore) -> None:
    conv = f"conv-{uuid.uuid4().hex[:12]}"
    async with store.conversation_lock(conv, ttl=0.3):
        await anyio.sleep(0.7)  # Two ttl's: only renewal keeps it.
        assert not await store.try_lease(f"conversation:{conv}", "intruder", ttl=1)


async def test_turns_in_one_process_are_serialised(store: ConversationStore) -> None:
    conv = f"conv-{uuid.uuid4().hex[:12]}"
    inside = 0
    most = 0

    async def turn(i: int) -> None:
        nonlocal inside, most
        async with store.conversation_lock(conv):
            inside += 1
            most = max(most, inside)
            user, _ = await store.add_user_message(conv, f"t{i}")
            await store.add_assistant_message(user.id, f"r{i}")
            inside -= 1

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(turn, i)
    leaf = await store.active_leaf(conv)
    assert leaf is not None
    path = await store.path(leaf.id)
    assert most == 1
    assert [m.role for m in path] == ["user", "assistant"] * 10
    assert all(b.content == "r" + a.content[1:] for a, b in zip(path[::2], path[1::2], strict=True))
