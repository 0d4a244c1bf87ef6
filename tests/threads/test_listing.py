"""`list_conversations`: the newest first, counts over every branch, the user, since and
limit filters, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from frontdesk.threads.listing import list_conversations
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


async def test_lists_a_users_conversations_newest_first_with_counts(
    store: ConversationStore,
) -> None:
    user = "u-" + uuid.uuid4().hex[:8]
    old, new = f"{user}-old", f"{user}-new"
    first, _ = await store.add_user_message(old, "hello", user_id=user)
    await store.add_assistant_message(first.id, "hi")
    # An edit is a second user message on another branch: counted too.
    await store.add_user_message(old, "hello again", user_id=user, parent_id=None)
    await store.add_user_message(new, "later", user_id=user)
    await store.add_user_message(f"{user}-other", "not mine", user_id="someone-else")

    rows = await list_conversations(store.engine, user=user)

    assert [r.conversation_id for r in rows] == [new, old]
    assert [(r.user_id, r.messages, r.user_turns) for r in rows] == [(user, 1, 1), (user, 3, 2)]
    assert rows[0].last_message_at is not None and rows[0].created_at
    assert len(await list_conversations(store.engine, user=user, limit=1)) == 1
    future = datetime.now(UTC) + timedelta(days=1)
    assert await list_conversations(store.engine, user=user, since=future) == []
    past = datetime.now(UTC) - timedelta(days=1)
    assert len(await list_conversations(store.engine, user=user, since=past)) == 2
