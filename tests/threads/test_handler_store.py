"""A category's own key-value data in the store's database."""

from __future__ import annotations

import uuid

import pytest

from frontdesk.threads.errors import InvalidInput
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
