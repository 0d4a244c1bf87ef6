"""`frontdesk demo` and `frontdesk chat` run end to end on the offline stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from frontdesk.cli import app


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_demo_runs_the_potato_shop_offline_and_says_so(runner: CliRunner, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    result = runner.invoke(app, ["demo", "--db", db], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "offline stand-in" in out
    for expected in (
        '{"variety": "purple", "bags": 3, "confirmed": false}',
        '{"order_number": "77120"}',
        '{"order_number": "88213", "reason": null}',
        "ORDER_STATUS",
        "REFUND",
        "OTHER",
        "[offline] Please confirm: buying 3 bags of purple potatoes",
        "refunded",
    ):
        assert expected in out
    assert '{"variety": "purple", "bags": 3, "confirmed": true}' in out
    assert "is placed and will be delivered tomorrow" in out
    # Nine turns, then two in a new conversation (a fact remembered, a policy question).
    assert out.count("instruction") == 11
    # A fact said in the first conversation is used in the next one.
    assert "- Allergic to peanuts" in out
    # Rich may wrap a reply inside its panel (the console's width is set when it is made).
    flat = " ".join(out.replace("\u2502", " ").split())
    assert "(I remember: Allergic to peanuts.)" in flat
    assert "frontdesk memory show demo-user" in out
    assert "frontdesk audit show demo-" in out
    # The policy question is answered from the shop's help page, which the reply cites.
    assert "sources      potato_shop/help.md - Storing potatoes (v1)" in out


def test_chat_answers_each_line_and_keeps_the_conversation(
    runner: CliRunner, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'chat.db'}"
    lines = "I'd like two bags of idaho potatoes\n\x00bad\nwhere is order 88213?\n\n"
    result = runner.invoke(
        app,
        ["chat", "--db", db, "--model", "offline", "--conversation", "c-1"],
        input=lines,
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert '"variety": "idaho", "bags": 2' in result.output
    assert "control character U+0000" in result.output
    assert "ORDER_STATUS" in result.output and "88213" in result.output
    shown = runner.invoke(app, ["thread", "show", "c-1", "--db", db], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "two bags of idaho" in shown.output


def test_chat_names_a_bad_app_clearly(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["chat", "--app", "no_such_module:build"], input="\n")
    assert result.exit_code != 0
    assert "cannot import 'no_such_module'" in str(result.exception) + result.output
