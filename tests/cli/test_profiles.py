"""`--profile NAME` on the commands that list or replay conversations: one deployment's
profiles (the potato shop and the card desk) apart."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.orchestrator.app import load_app

runner = CliRunner()


async def _record(url: str) -> None:
    orch = load_app("frontdesk.examples.card_desk:desks", model="offline", db=url)
    try:
        await orch.handle("spud-1", "Where is my order 77120?", user_id="ann", profile="potatoes")
        await orch.handle("card-1", "I lost my card ending 4242", user_id="bob", profile="cards")
        await orch.handle("card-1", "Thanks", user_id="bob")  # The recorded profile.
    finally:
        await orch.aclose()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('profiles') / 'fd.db'}"
    asyncio.run(_record(url))
    return url


def _json(*args: str) -> Any:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_conversations_of_one_profile(db: str) -> None:
    rows = _json("conversations", "--json", "--profile", "cards", "--db", db)
    assert [(r["conversation_id"], r["profile"]) for r in rows] == [("card-1", "cards")]
    everyone = _json("conversations", "--json", "--db", db)
    assert {r["conversation_id"] for r in everyone} == {"spud-1", "card-1"}
    none = runner.invoke(app, ["conversations", "--profile", "loans", "--db", db])
    assert none.exit_code == 0 and "of profile loans" in none.output


def test_audit_commands_take_the_profile(db: str) -> None:
    potatoes = _json("audit", "cost", "--all", "--profile", "potatoes", "--json", "--db", db)
    cards = _json("audit", "cost", "--all", "--profile", "cards", "--json", "--db", db)
    assert (len(potatoes["by_turn"]), len(cards["by_turn"])) == (1, 2)  # spud-1, card-1
    replayed = runner.invoke(
        app,
        ["audit", "replay", "--all", "--profile", "cards", "--model", "recorded", "--db", db],
        env={"COLUMNS": "200"},
    )
    assert replayed.exit_code == 0, replayed.output
    assert "card-1" in replayed.output and "spud-1" not in replayed.output
