"""A category's own key-value data in the store's database, in its scopes, and its erasure."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from frontdesk.errors import InvalidInput, UserStateUnavailable
from frontdesk.threads import ERASED_MARKER, HandlerState, HandlerStore
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


async def test_values_round_trip_per_namespace(store: ConversationStore) -> None:
    orders = store.handler_store(f"ORDERS-{uuid.uuid4().hex[:8]}")
    refunds = store.handler_store(f"REFUNDS-{uuid.uuid4().hex[:8]}")
    await orders.put("order:1", {"variety": "purple", "bags": 1, "tags": ["a", None]})
    await orders.put("order:1", {"variety": "purple", "bags": 2})
    await orders.put("order:2", [1, 2.5, "x"])
    await orders.put("Order:3", "capital")
    await refunds.put("order:1", True)

    assert await orders.get("order:1") == {"variety": "purple", "bags": 2}
    assert await orders.get("missing") is None
    assert await orders.get("missing", default=0) == 0
    assert await orders.items("order:") == [
        ("order:1", {"variety": "purple", "bags": 2}),
        ("order:2", [1, 2.5, "x"]),
    ]
    assert [k for k, _ in await orders.items()] == ["Order:3", "order:1", "order:2"]
    assert await refunds.items() == [("order:1", True)]


async def test_a_value_that_is_not_json_is_refused(store: ConversationStore) -> None:
    data = store.handler_store(f"ORDERS-{uuid.uuid4().hex[:8]}")
    with pytest.raises(InvalidInput, match="JSON"):
        await data.put("k", {1, 2})
    with pytest.raises(InvalidInput, match="JSON"):
        await data.put("k", float("nan"))
    assert await data.items() == []


async def test_it_is_the_handler_store_the_experts_expect(store: ConversationStore) -> None:
    from frontdesk.experts.category import HandlerStore as ExpectedStore

    data: ExpectedStore = store.handler_store("ORDERS")  # mypy checks the protocol here.
    await data.put("k", 1)
    assert await data.get("k") == 1


# Scopes ------------------------------------------------------------------------------------


def _state(
    store: ConversationStore, namespace: str, conversation: str, user: str | None
) -> HandlerState:
    return store.handler_state(namespace, conversation_id=conversation, user_id=user)


async def _rows(store: ConversationStore, namespace: str) -> list[tuple[str, str, str]]:
    """The (scope, scope_id, key) of every row of `namespace`, straight from the table."""
    async with store.engine.connect() as conn:
        result = await conn.execute(
            sa.text(
                "SELECT scope, scope_id, key FROM handler_data WHERE namespace = :n"
                " ORDER BY scope, scope_id, key"
            ),
            {"n": namespace},
        )
        return [(r[0], r[1], r[2]) for r in result]


def _ids() -> tuple[str, str, str, str, str]:
    """A namespace, two conversations and two users of this test alone (PostgreSQL is shared)."""
    tag = uuid.uuid4().hex[:8]
    return f"TICKETS-{tag}", f"a-{tag}", f"b-{tag}", f"ann-{tag}", f"bob-{tag}"


async def test_each_scope_keeps_its_own_value_under_the_same_key(store: ConversationStore) -> None:
    namespace, conv_a, conv_b, ann, bob = _ids()
    in_a = _state(store, namespace, conv_a, ann)
    in_b = _state(store, namespace, conv_b, ann)
    bobs = _state(store, namespace, conv_b, bob)
    await in_a.conversation.put("ticket", {"id": "T-1"})
    await in_a.user.put("ticket", "ann's")
    await in_a.everyone.put("ticket", "everyone's")

    assert await in_a.conversation.get("ticket") == {"id": "T-1"}
    assert await in_b.conversation.get("ticket") is None  # Conversation B sees not A's ticket.
    assert await in_b.user.get("ticket") == "ann's"  # Ann's, from her other conversation.
    assert await bobs.user.get("ticket") is None  # Not Bob's.
    assert await bobs.everyone.get("ticket") == "everyone's"
    assert await store.handler_store(namespace).get("ticket") == "everyone's"  # context.store
    assert await _rows(store, namespace) == [
        ("conversation", conv_a, "ticket"),
        ("everyone", "", "ticket"),
        ("user", ann, "ticket"),
    ]


async def test_shared_names_a_namespace_and_keeps_the_scope(store: ConversationStore) -> None:
    shop, conv_a, conv_b, ann, bob = _ids()
    placing = _state(store, "ORDERS", conv_a, ann).shared(shop)
    looking = _state(store, "ORDER_STATUS", conv_b, ann).shared(shop)
    await placing.user.put("order:1", {"bags": 2})
    await placing.conversation.put("pending", True)

    assert await looking.user.get("order:1") == {"bags": 2}  # Another category, same user.
    assert await looking.conversation.get("pending") is None  # Another conversation.
    assert await _state(store, "ORDER_STATUS", conv_b, ann).user.get("order:1") is None
    assert await _state(store, "ORDER_STATUS", conv_b, bob).shared(shop).user.items() == []
    # A scope's `shared` is the same scope in the other namespace.
    mine = _state(store, "ORDERS", conv_a, ann).user.shared(shop)
    assert await mine.items("order:") == [("order:1", {"bags": 2})]


async def test_delete_removes_the_row_and_says_whether_it_was_there(
    store: ConversationStore,
) -> None:
    namespace, conv_a, _, ann, _ = _ids()
    state = _state(store, namespace, conv_a, ann)
    for scope in (state.conversation, state.user, state.everyone):
        await scope.put("pending", {"bags": 1})
        await scope.put("kept", None)  # None is a stored null: the key stays.
    assert await state.user.delete("pending") is True

    assert ("user", ann, "pending") not in await _rows(store, namespace)
    assert await state.user.get("pending", "gone") == "gone"
    assert await state.user.items() == [("kept", None)]
    assert await state.user.delete("pending") is False
    assert await state.conversation.delete("missing") is False
    assert await state.conversation.get("pending") == {"bags": 1}  # Other scopes keep theirs.
    assert await state.everyone.delete("pending") and await state.conversation.delete("pending")
    assert await _rows(store, namespace) == [
        ("conversation", conv_a, "kept"),
        ("everyone", "", "kept"),
        ("user", ann, "kept"),
    ]


async def test_items_lists_one_scope_by_prefix(store: ConversationStore) -> None:
    namespace, conv_a, conv_b, ann, _ = _ids()
    here = _state(store, namespace, conv_a, ann).conversation
    await here.put("t:2", 2)
    await here.put("t:1", 1)
    await here.put("T:3", 3)
    await _state(store, namespace, conv_b, ann).conversation.put("t:9", 9)
    await _state(store, namespace, conv_a, ann).user.put("t:8", 8)

    assert await here.items("t:") == [("t:1", 1), ("t:2", 2)]
    assert await here.items() == [("T:3", 3), ("t:1", 1), ("t:2", 2)]
    assert await here.items("nothing") == []


@pytest.mark.parametrize("scope", ["conversation", "user", "everyone"])
async def test_every_scope_refuses_what_json_cannot_hold(
    store: ConversationStore, scope: str
) -> None:
    namespace, conv_a, _, ann, _ = _ids()
    data: HandlerStore = getattr(_state(store, namespace, conv_a, ann), scope)
    with pytest.raises(InvalidInput, match="JSON"):
        await data.put("k", {1, 2})
    with pytest.raises(InvalidInput, match="JSON"):
        await data.put("k", {"when": object()})
    with pytest.raises(InvalidInput, match="JSON"):
        await data.put("k", [float("inf")])
    with pytest.raises(InvalidInput, match="1 to 255 characters"):
        await data.put("", 1)
    with pytest.raises(InvalidInput, match="1 to 255 characters"):
        await data.put("k" * 256, 1)
    with pytest.raises(InvalidInput, match="NUL"):
        await data.put("a\x00b", 1)
    with pytest.raises(InvalidInput, match="keys are strings"):
        await data.put(7, 1)  # type: ignore[arg-type]
    assert await _rows(store, namespace) == []


async def test_the_user_scope_without_a_user_id_says_what_to_do(store: ConversationStore) -> None:
    namespace, conv_a, _, _, _ = _ids()
    state = _state(store, namespace, conv_a, None)
    with pytest.raises(
        UserStateUnavailable, match=r"needs a user id.*context\.state\.conversation"
    ):
        state.user  # noqa: B018 (the property is what raises)
    with pytest.raises(UserStateUnavailable):
        state.shared("shop").user  # noqa: B018
    await state.conversation.put("k", 1)  # The other scopes work as ever.
    assert await state.conversation.get("k") == 1


async def test_scope_ids_must_be_storable(store: ConversationStore) -> None:
    with pytest.raises(InvalidInput, match="conversation scope's id"):
        _state(store, "TICKETS", "", "ann")
    with pytest.raises(InvalidInput, match="user scope's id"):
        _state(store, "TICKETS", "c", "").user  # noqa: B018
    with pytest.raises(InvalidInput, match="everyone scope has no id"):
        HandlerStore(store.engine, "TICKETS", scope="everyone", scope_id="ann")
    with pytest.raises(InvalidInput, match="scope must be"):
        HandlerStore(store.engine, "TICKETS", scope="team", scope_id="t")  # type: ignore[arg-type]


async def test_it_is_the_handler_state_the_experts_expect(store: ConversationStore) -> None:
    from frontdesk.experts.category import HandlerState as ExpectedState

    namespace, conv_a, _, ann, _ = _ids()
    state: ExpectedState = _state(store, namespace, conv_a, ann)  # mypy checks the protocol.
    shared: ExpectedState = state.shared(namespace)
    await shared.user.put("k", 1)
    assert await state.user.get("k") == 1


# Erasure -----------------------------------------------------------------------------------


async def test_deleting_a_users_state_removes_it_from_every_namespace(
    store: ConversationStore,
) -> None:
    namespace, conv_a, conv_b, ann, bob = _ids()
    anns = _state(store, namespace, conv_a, ann)
    await anns.user.put("order:1", {"address": "1 Elm Street"})
    await anns.user.put("order:2", {"address": "1 Elm Street"})
    await anns.shared(f"{namespace}-shop").user.put("card", "4242")
    await anns.conversation.put("pending", True)
    await anns.everyone.put("stock", 10)
    await _state(store, namespace, conv_b, bob).user.put("order:3", "bob's")

    assert await store.delete_user_handler_state(ann) == 3
    assert (
        await anns.user.items() == [] and await anns.shared(f"{namespace}-shop").user.items() == []
    )
    assert await _state(store, namespace, conv_b, bob).user.get("order:3") == "bob's"
    assert await anns.conversation.get("pending") is True  # Conversation state: see below.
    assert await anns.everyone.get("stock") == 10  # Belongs to no user.
    assert ("user", ann, "order:1") not in await _rows(store, namespace)
    assert await store.delete_user_handler_state(ann) == 0


async def test_erasing_conversations_leaves_their_keys_with_a_marker(
    store: ConversationStore,
) -> None:
    namespace, conv_a, conv_b, ann, _ = _ids()
    conv_c = f"c-{conv_a}"
    in_a = _state(store, namespace, conv_a, ann)
    await in_a.conversation.put("pending", {"address": "1 Elm Street"})
    await in_a.conversation.put("placed:k1", "10001")
    await in_a.shared(f"{namespace}-shop").conversation.put("note", "call after 6")
    await _state(store, namespace, conv_b, ann).conversation.put("pending", {"x": 1})
    await _state(store, namespace, conv_c, ann).conversation.put("pending", "c's")
    await in_a.user.put("order:1", "ann's")

    assert await store.erase_conversation_handler_state([conv_a, conv_b, conv_a]) == 4
    assert await in_a.conversation.items() == [
        ("pending", ERASED_MARKER),
        ("placed:k1", ERASED_MARKER),
    ]
    assert await in_a.shared(f"{namespace}-shop").conversation.get("note") == "[erased]"
    assert await _state(store, namespace, conv_b, ann).conversation.get("pending") == "[erased]"
    assert await _state(store, namespace, conv_c, ann).conversation.get("pending") == "c's"
    assert await in_a.user.get("order:1") == "ann's"
    marker = {"erased": True}
    assert await store.erase_conversation_handler_state([conv_c], marker=marker) == 1
    assert await _state(store, namespace, conv_c, ann).conversation.get("pending") == marker
    assert await store.erase_conversation_handler_state([]) == 0
    with pytest.raises(InvalidInput):
        await store.erase_conversation_handler_state([""])


async def test_erasing_many_conversations_at_once(store: ConversationStore) -> None:
    namespace, conv_a, _, ann, _ = _ids()
    ids = [f"{conv_a}-{i}" for i in range(1_203)]  # More than one statement's worth.
    for conversation in ids[::100]:
        await _state(store, namespace, conversation, ann).conversation.put("k", "v")
    assert await store.erase_conversation_handler_state(ids) == len(ids[::100])
