"""`frontdesk memory show|forget`: what is remembered about a user, and forgetting it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.examples.potato_shop import build

runner = CliRunner()


async def _learn(url: str) -> None:
    orch = build(model="offline", store=url)
    try:
        await orch.handle("c-1", "I live in Pune and I'm allergic to peanuts", user_id="asha")
        await orch.remember("ben", "Prefers replies in Hindi", key="language")
    finally:
        await orch.aclose()


def _show(url: str, user: str) -> list[dict[str, str]]:
    result = runner.invoke(app, ["memory", "show", user, "--json", "--db", url])
    assert result.exit_code == 0, result.output
    shown: list[dict[str, str]] = json.loads(result.stdout)
    return shown


def test_show_lists_a_users_facts_and_forget_deletes_one_or_all(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fd.db'}"
    asyncio.run(_learn(url))
    asha = _show(url, "asha")
    assert sorted(m["text"] for m in asha) == ["Allergic to peanuts", "Lives in Pune"]
    assert all(m["id"] and m["source"] == "memory_expert" for m in asha)
    assert [m["text"] for m in _show(url, "ben")] == ["Prefers replies in Hindi"]

    table = runner.invoke(app, ["memory", "show", "asha", "--db", url])
    assert table.exit_code == 0 and "Pune" in table.stdout

    one = runner.invoke(app, ["memory", "forget", "asha", asha[0]["id"], "--db", url])
    assert one.exit_code == 0, one.output
    assert [m["id"] for m in _show(url, "asha")] == [asha[1]["id"]]

    again = runner.invoke(app, ["memory", "forget", "asha", asha[0]["id"], "--db", url])
    assert again.exit_code == 2 and "no memory" in again.output
    theirs = runner.invoke(app, ["memory", "forget", "ben", asha[1]["id"], "--db", url])
    assert theirs.exit_code == 2  # Another user's id is not found.
    both = runner.invoke(app, ["memory", "forget", "asha", asha[1]["id"], "--all", "--db", url])
    assert both.exit_code == 2 and "not both" in both.output

    every = runner.invoke(app, ["memory", "forget", "asha", "--all", "--db", url])
    assert every.exit_code == 0 and "forgot 1 fact" in every.stdout
    assert _show(url, "asha") == []
    assert [m["text"] for m in _show(url, "ben")] == ["Prefers replies in Hindi"]

    verify = runner.invoke(app, ["audit", "verify", "--all", "--json", "--db", url])
    assert verify.exit_code == 0, verify.output
    report = json.loads(verify.stdout)
    chains = [c["conversation_id"] for c in report["conversations"]]
    assert any(c.startswith("user:") for c in chains)
