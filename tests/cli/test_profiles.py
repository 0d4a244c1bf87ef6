"""`--profile NAME` on the commands that list or replay conversations: one deployment's
profiles (the potato shop and the card desk) apart."""

from __future__ import annotations

from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.devkit.app import load_app
from tests.cli.conftest import cli_json

runner = CliRunner()


async def record(url: str) -> None:
    """What the module's `db` fixture (tests/cli/conftest.py) holds."""
    orch = load_app("frontdesk.examples.card_desk:desks", model="offline", db=url)
    try:
        await orch.handle("spud-1", "Where is my order 77120?", user_id="ann", profile="potatoes")
        await orch.handle("card-1", "I lost my card ending 4242", user_id="bob", profile="cards")
        await orch.handle("card-1", "Thanks", user_id="bob")  # The recorded profile.
    finally:
        await orch.aclose()


def test_conversations_of_one_profile(db: str) -> None:
    rows = cli_json("conversations", "--json", "--profile", "cards", "--db", db)
    assert [(r["conversation_id"], r["profile"]) for r in rows] == [("card-1", "cards")]
    everyone = cli_json("conversations", "--json", "--db", db)
    assert {r["conversation_id"] for r in everyone} == {"spud-1", "card-1"}
    none = runner.invoke(app, ["conversations", "--profile", "loans", "--db", db])
    assert none.exit_code == 0 and "of profile loans" in none.output


def test_audit_commands_take_the_profile(db: str) -> None:
    potatoes = cli_json("audit", "cost", "--all", "--profile", "potatoes", "--json", "--db", db)
    cards = cli_json("audit", "cost", "--all", "--profile", "cards", "--json", "--db", db)
    assert (len(potatoes["by_turn"]), len(cards["by_turn"])) == (1, 2)  # spud-1, card-1
    replayed = runner.invoke(
        app,
        ["audit", "replay", "--all", "--profile", "cards", "--model", "recorded", "--db", db],
        env={"COLUMNS": "200"},
    )
    assert replayed.exit_code == 0, replayed.output
    assert "card-1" in replayed.output and "spud-1" not in replayed.output
