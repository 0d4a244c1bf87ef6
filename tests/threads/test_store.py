"""The conversation store on SQLite (file, WAL) and PostgreSQL: tree, idempotency, reads."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC

import pytest

from frontdesk.errors import (
    IdempotencyConflict,
    InvalidInput,
    MessageNotFound,
    MessageNotInConversation,
)
from frontdesk.threads.store import UNSET, ConversationStore

pytestmark = pytest.mark.anyio


def conv_id() -> str:
    """A conversation id no other test uses (the PostgreSQL database is shared)."""
    return f"conv-{uuid.uuid4().hex[:12]}"


async def test_messages_round_trip_with_their_fields(store: ConversationStore) -> None:
    conv = conv_id()
    user, created = await store.add_user_message(
        conv,
        "I'd like a bag of purple potatoes",
        user_id="u-1",
        client_message_id="m-1",
        token_count=9,
    )
    reply = await store.add_assistant_message(
        user.id,
        "Please confirm one bag.",
        token_count=5,
        model="offline",
        prompt_versions={"triage": "triage@1", "response": "response@2"},
    )

    assert created
    assert await store.get(user.id) == user
    assert await store.get(reply.id) == reply
    assert (user.role, user.parent_id, user.token_count, user.client_message_id) == (
        "user",
        None,
        9,
        "m-1",
    )
    assert (reply.role, reply.parent_id, reply.model) == ("assistant", user.id, "offline")
    assert reply.prompt_versions == {"triage": "triage@1", "response": "response@2"}
    assert user.created_at.tzinfo is not None and user.created_at.utcoffset() == UTC.utcoffset(None)
    assert (await store.get(user.id)).created_at == user.created_at
    record = await store.conversation(conv)
    assert record is not None
    assert (record.id, record.user_id, record.metadata, record.active_leaf_id) == (
        conv,
        "u-1",
        {},
        reply.id,
    )
    assert await store.conversation(conv_id()) is None


async def test_path_follows_parents_when_time_order_differs(store: ConversationStore) -> None:
    conv = conv_id()
    u1, _ = await store.add_user_message(conv, "u1")
    a1 = await store.add_assistant_message(u1.id, "a1")
    u2, _ = await store.add_user_message(conv, "u2")
    a2 = await store.add_assistant_message(u2.id, "a2")
    # An edit of u2: a sibling under a1, answered; created after a2.
    u2_edit, _ = await store.add_user_message(conv, "u2 edited", parent_id=a1.id)
    a2_edit = await store.add_assistant_message(u2_edit.id, "a2 edited")
    # Back on the first branch, a new turn created after the edit.
    await store.set_active_leaf(conv, a2.id)
    u3, _ = await store.add_user_message(conv, "u3")
    a3 = await store.add_assistant_message(u3.id, "a3")

    by_time = [m.content for m in await store.messages(conv)]
    assert by_time == ["u1", "a1", "u2", "a2", "u2 edited", "a2 edited", "u3", "a3"]
    assert [m.content for m in await store.path(a3.id)] == ["u1", "a1", "u2", "a2", "u3", "a3"]
    assert [m.content for m in await store.path(a2_edit.id)] == [
        "u1",
        "a1",
        "u2 edited",
        "a2 edited",
    ]
    assert u3.parent_id == a2.id
    assert [m.id for m in await store.children(a1.id)] == [u2.id, u2_edit.id]
    assert {m.id for m in await store.branches(conv)} == {a3.id, a2_edit.id}


async def test_path_stop_after_and_last(store: ConversationStore) -> None:
    conv = conv_id()
    ids = []
    for i in range(4):
        user, _ = await store.add_user_message(conv, f"u{i}")
        ids += [user.id, (await store.add_assistant_message(user.id, f"a{i}")).id]

    assert [m.content for m in await store.path(ids[-1], stop_after=ids[3])] == [
        "u2",
        "a2",
        "u3",
        "a3",
    ]
    assert await store.path(ids[-1], stop_after=ids[-1]) == []
    assert [m.content for m in await store.path(ids[-1], last=3)] == ["a2", "u3", "a3"]
    assert [m.content for m in await store.path(ids[2], last=10)] == ["u0", "a0", "u1"]
    other, _ = await store.add_user_message(conv, "root of another tree", parent_id=None)
    with pytest.raises(InvalidInput, match="not an ancestor"):
        await store.path(ids[-1], stop_after=other.id)
    with pytest.raises(MessageNotFound):
        await store.path("no-such-message")
    with pytest.raises(InvalidInput, match="last"):
        await store.path(ids[-1], last=0)


async def test_regenerate_adds_a_sibling_reply(store: ConversationStore) -> None:
    conv = conv_id()
    user, _ = await store.add_user_message(conv, "hello")
    first = await store.add_assistant_message(user.id, "first answer")
    second = await store.add_assistant_message(user.id, "second answer")

    assert [m.id for m in await store.replies_to(user.id)] == [first.id, second.id]
    assert second.parent_id == first.parent_id == user.id
    assert (await store.active_leaf(conv)) == second
    assert {m.id for m in await store.branches(conv)} == {first.id, second.id}
    with pytest.raises(InvalidInput, match="under a user message"):
        await store.add_assistant_message(first.id, "a reply to a reply")


async def test_switching_the_active_leaf_moves_the_next_turn(store: ConversationStore) -> None:
    conv = conv_id()
    user, _ = await store.add_user_message(conv, "q")
    first = await store.add_assistant_message(user.id, "answer 1")
    await store.add_assistant_message(user.id, "answer 2")

    await store.set_active_leaf(conv, first.id)
    follow, _ = await store.add_user_message(conv, "follow-up")

    assert follow.parent_id == first.id
    assert [m.content for m in await store.path(follow.id)] == ["q", "answer 1", "follow-up"]
    assert await store.active_leaf(conv) == follow


async def test_foreign_or_unknown_ids_are_typed_errors(store: ConversationStore) -> None:
    conv, other = conv_id(), conv_id()
    mine, _ = await store.add_user_message(conv, "mine")
    theirs, _ = await store.add_user_message(other, "theirs")

    with pytest.raises(MessageNotInConversation):
        await store.set_active_leaf(conv, theirs.id)
    with pytest.raises(MessageNotInConversation):
        await store.add_user_message(conv, "edit", parent_id=theirs.id)
    with pytest.raises(MessageNotFound):
        await store.set_active_leaf(conv, "missing")
    with pytest.raises(MessageNotFound):
        await store.get("missing")
    with pytest.raises(MessageNotFound):
        await store.add_assistant_message("missing", "reply")
    assert await store.active_leaf(conv) == mine
    assert [m.id for m in await store.messages(conv)] == [mine.id]


async def test_same_client_id_twice_is_one_message(store: ConversationStore) -> None:
    conv = conv_id()
    first, created = await store.add_user_message(conv, "two bags", client_message_id="m-7")
    again, created_again = await store.add_user_message(conv, "two bags", client_message_id="m-7")

    assert (created, created_again) == (True, False)
    assert again == first
    assert await store.messages(conv) == [first]
    assert await store.find_by_client_id(conv, "m-7") == first
    assert await store.find_by_client_id(conv, "m-8") is None
    # The same client id in another conversation is another message.
    elsewhere, created_elsewhere = await store.add_user_message(
        conv_id(), "two bags", client_message_id="m-7"
    )
    assert created_elsewhere and elsewhere.id != first.id


async def test_same_client_id_other_text_conflicts_and_writes_nothing(
    store: ConversationStore,
) -> None:
    conv = conv_id()
    first, _ = await store.add_user_message(conv, "two bags", client_message_id="m-1")
    before = await store.conversation(conv)

    with pytest.raises(IdempotencyConflict, match="new client_message_id") as caught:
        await store.add_user_message(conv, "three bags", client_message_id="m-1")

    assert caught.value.client_message_id == "m-1"
    assert await store.messages(conv) == [first]
    assert await store.conversation(conv) == before


async def test_concurrent_sends_of_one_client_id_store_one_message(
    store: ConversationStore,
) -> None:
    conv = conv_id()
    results = await asyncio.gather(
        *(store.add_user_message(conv, "hi", client_message_id="m-1") for _ in range(8))
    )

    assert sum(created for _, created in results) == 1
    assert len({record.id for record, _ in results}) == 1
    assert len(await store.messages(conv)) == 1


@pytest.mark.parametrize(
    "text", ["nul \x00 inside", "lone surrogate \ud800"], ids=["nul", "surrogate"]
)
async def test_unstorable_text_is_refused_the_same_on_both(
    store: ConversationStore, text: str
) -> None:
    conv = conv_id()
    with pytest.raises(InvalidInput):
        await store.add_user_message(conv, text)
    with pytest.raises(InvalidInput):
        await store.add_user_message(text, "fine text")
    user, _ = await store.add_user_message(conv, "fine")
    with pytest.raises(InvalidInput):
        await store.add_assistant_message(user.id, text)
    assert [m.content for m in await store.messages(conv)] == ["fine"]


async def test_odd_but_valid_text_round_trips(store: ConversationStore) -> None:
    texts = ["", "   ", "\u200b" * 1000, "\u202eevil", "🥔🥔", "\n\nHuman: hi", "x" * 100_000]
    conv = conv_id()
    for text in texts:
        user, _ = await store.add_user_message(conv, text)
        assert (await store.get(user.id)).content == text


async def test_explicit_root_starts_a_new_tree(store: ConversationStore) -> None:
    conv = conv_id()
    first, _ = await store.add_user_message(conv, "one")
    second, _ = await store.add_user_message(conv, "two", parent_id=None)
    third, _ = await store.add_user_message(conv, "three", parent_id=UNSET)

    assert second.parent_id is None
    assert third.parent_id == second.id
    assert first.parent_id is None
