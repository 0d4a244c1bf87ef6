"""The whole pipeline on the offline stand-in: the potato scenario with no network at all."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from frontdesk.devkit.app import describe_models
from frontdesk.examples.potato_shop import build
from frontdesk.orchestrator import SyncOrchestrator

pytestmark = pytest.mark.anyio


async def test_offline_reproduces_the_potato_scenario(
    db_url: str, scenario: Callable[[str], dict[str, Any]]
) -> None:
    orch = build(model="offline", store=db_url)
    for turn in scenario("potatoes")["turns"]:
        reply = await orch.handle("c", turn["user"])
        assert reply.category == turn["expect"]["category"]
        assert reply.request is not None
        assert reply.request.model_dump(include={"variety", "bags"}) == turn["expect"]["request"]
        assert reply.text.startswith("[offline]")
        assert reply.models == dict.fromkeys(("triage", "request", "response"), "offline")
    thread = await orch.user_thread("c")
    await orch.aclose()
    assert [m.role for m in thread.messages] == ["user", "assistant"] * 4


async def test_offline_refunds_priyas_late_delivery_once(
    db_url: str, scenario: Callable[[str], dict[str, Any]]
) -> None:
    first = scenario("priya-late-delivery")["turns"][0]
    orch = build(model="offline", store=db_url)
    reply = await orch.handle("priya", first["user"])
    again = await orch.handle("priya", "Please refund the delivery fee for order 88213")
    await orch.aclose()
    assert reply.category == "REFUND"
    assert (
        reply.request is not None
        and reply.request.model_dump(include={"order_number"}) == (first["expect"]["request"])
    )
    assert reply.outcome is not None and reply.outcome.data["refunded"] is True
    assert again.outcome is not None and again.outcome.data.get("already") is True


def test_the_sync_wrapper_runs_turns_without_an_event_loop(db_url: str) -> None:
    with SyncOrchestrator(
        build(model="offline", store=db_url).categories.values(), model="offline", store=db_url
    ) as orch:
        reply = orch.handle("c", "I'd like to buy a bag of purple potatoes")
        assert reply.category == "ORDERS"
        assert [m.content for m in orch.transcript("c")] == [
            "I'd like to buy a bag of purple potatoes",
            reply.text,
        ]


def test_the_offline_model_is_named_plainly() -> None:
    assert "offline stand-in" in describe_models("offline")
    assert "No ANTHROPIC_API_KEY" not in describe_models("offline")  # asked for, not a fallback
    assert describe_models("anthropic:claude-sonnet-4-5") == (
        "Models: default=anthropic:claude-sonnet-4-5"
    )


async def test_offline_places_the_order_only_once_the_user_says_yes(db_url: str) -> None:
    orch = build(model="offline", store=db_url)
    asked = await orch.handle("c", "I'd like two bags of purple potatoes")
    placed = await orch.handle("c", "yes, confirm")
    shop = orch.store.handler_state("potato_shop", conversation_id="c", user_id=None)
    stored = await shop.conversation.items("order:")
    await orch.aclose()
    assert asked.outcome is not None and asked.outcome.data["action"] == "confirm_order"
    assert placed.request is not None and placed.request.model_dump() == {
        "variety": "purple",
        "bags": 2,
        "confirmed": True,
    }
    assert placed.outcome is not None
    number = placed.outcome.data["order_number"]
    assert [key for key, _ in stored] == [f"order:{number}"]
    assert number in placed.text
