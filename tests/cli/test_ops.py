"""Ops commands: `frontdesk conversations`; `--json` on thread show, audit show/cost/verify."""

from __future__ import annotations

from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.examples.potato_shop import build
from tests.cli.conftest import cli_json

runner = CliRunner()


async def record(url: str) -> None:
    """What the module's `db` fixture (tests/cli/conftest.py) holds."""
    orch = build(model="offline", store=url)
    try:
        await orch.handle("a-1", "Where is my order 77120?", user_id="ann")
        await orch.handle("a-1", "Thanks, that's helpful", user_id="ann")
        await orch.handle("b-1", "I'd like two bags of purple potatoes", user_id="bob")
    finally:
        await orch.aclose()


def test_conversations_lists_newest_first_with_counts(db: str) -> None:
    rows = cli_json("conversations", "--json", "--db", db)
    assert [r["conversation_id"] for r in rows] == ["b-1", "a-1"]
    a = rows[1]
    assert (a["user_id"], a["messages"], a["user_turns"]) == ("ann", 4, 2)
    assert (a["resolution"], a["resolved_by"]) == ("open", None)
    anns = cli_json("conversations", "--json", "--user", "ann", "--db", db)
    assert [r["conversation_id"] for r in anns] == ["a-1"]
    assert cli_json("conversations", "--json", "--since", "2999-01-01", "--db", db) == []
    table = runner.invoke(app, ["conversations", "--db", db], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "a-1" in table.output and "bob" in table.output
    assert "resolution" in table.output and "open" in table.output
    bad = runner.invoke(app, ["conversations", "--since", "yesterday", "--db", db])
    assert bad.exit_code == 2 and "--since 'yesterday'" in bad.output


def test_thread_showcli_json(db: str) -> None:
    doc = cli_json("thread", "show", "a-1", "--json", "--db", db)
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant", "user", "assistant"]
    assert doc["messages"][0]["content"] == "Where is my order 77120?"
    assert doc["active_leaf_id"] == doc["messages"][-1]["id"]


def test_audit_show_cost_and_verifycli_json(db: str) -> None:
    shown = cli_json("audit", "show", "a-1", "--json", "--db", db)
    assert [t["category"] for t in shown["turns"]] == ["ORDER_STATUS", "OTHER"]
    assert shown["turns"][0]["tokens"]["input"] > 0 and shown["turns"][0]["on_active_path"]
    cost = cli_json("audit", "cost", "--all", "--json", "--db", db)
    assert {line["label"] for line in cost["by_expert"]} >= {"triage", "response"}
    assert cost["total"]["calls"] == sum(line["calls"] for line in cost["by_expert"])
    verified = cli_json("audit", "verify", "--all", "--json", "--db", db)
    assert verified["ok"] is True
    assert {c["conversation_id"] for c in verified["conversations"]} == {"a-1", "b-1"}
