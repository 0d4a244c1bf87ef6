"""The example shop is trustworthy: orders are found, a "yes" places one order, demo repeats."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.examples.potato_shop import build
from frontdesk.orchestrator import Orchestrator


async def _place(orch: Orchestrator, conversation: str, user_id: str | None = None) -> str:
    await orch.handle(conversation, "I'd like two bags of purple potatoes", user_id=user_id)
    placed = await orch.handle(conversation, "yes, confirm", user_id=user_id)
    assert placed.outcome is not None
    number: str = placed.outcome.data["order_number"]
    return number


@pytest.mark.anyio
async def test_order_status_finds_the_order_orders_placed(db_url: str) -> None:
    orch = build(model="offline", store=db_url)
    try:
        number = await _place(orch, "c")
        status = await orch.handle("c", f"What is the status of order {number}?")
        assert status.category == "ORDER_STATUS"
        assert status.outcome is not None and status.outcome.data["status"] == "being packed"
        assert "being packed" in status.text
        # Another conversation of nobody in particular cannot look it up ...
        other = await orch.handle("d", f"What is the status of order {number}?")
        assert other.outcome is not None and "cannot find" in other.outcome.instruction
        # ... but the same customer can, from any conversation.
        mine = await _place(orch, "e", user_id="u-1")
        later = await orch.handle("f", f"What is the status of order {mine}?", user_id="u-1")
        assert later.outcome is not None and later.outcome.data["order_number"] == mine
    finally:
        await orch.aclose()


@pytest.mark.anyio
async def test_a_bare_yes_after_a_handoff_places_no_second_order(db_url: str) -> None:
    orch = build(model="offline", store=db_url)
    try:
        number = await _place(orch, "c")
        handoff = await orch.handle("c", "I want to talk to a person")
        assert handoff.handoff
        await orch.hand_back("c")  # Nobody took it: the bot answers the next message.
        again = await orch.handle("c", "yes")
        shop = orch.store.handler_state("potato_shop", conversation_id="c", user_id=None)
        orders = await shop.conversation.items("order:")
    finally:
        await orch.aclose()
    assert [key for key, _ in orders] == [f"order:{number}"]
    assert again.outcome is not None and again.outcome.data["action"] == "nothing_to_confirm"
    assert number in again.text


def test_a_second_demo_is_the_same_as_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    outputs = []
    for _ in range(2):
        result = runner.invoke(app, ["demo"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    for out in outputs:
        assert "has been refunded" in out and "already refunded" not in out
        assert "Database: sqlite:///" in out and "frontdesk-demo-" in out
    assert not (tmp_path / "frontdesk.db").exists()


def test_triage_examples_are_plain_text_not_json_escapes(tmp_path: Path) -> None:
    orch = build(model="offline", store=f"sqlite:///{tmp_path / 'p.db'}")
    triage = orch.experts[0]
    request = triage.call.build(
        [{"role": "user", "content": "hi"}],
        output_type=triage.output_type,
        cache_prefix_messages=0,
        metadata={},
    )
    assert "\\u0027" not in request.system
    assert 'Examples: "I\'d like to buy a bag of purple potatoes"; "Make it' in request.system


def test_the_other_reply_names_topics_not_triage_descriptions() -> None:
    from frontdesk.examples.potato_shop import categories
    from frontdesk.orchestrator.fallbacks import small_talk

    instruction = small_talk(categories()).instruction
    assert "buying potatoes, where an order is and money back on an order." in instruction
    for category in categories():
        assert category.description not in instruction
    assert "maris piper" not in instruction and "not yet placed" not in instruction
