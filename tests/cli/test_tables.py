"""Tables for people and pipes (`cli/_options.py`): ids never cut, full values when piped,
an empty filtered listing that says what it left out, and hints that name real commands.

Run through the installed `frontdesk` in a subprocess, stdout a pipe as in a script, on
SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from frontdesk.cli import app
from frontdesk.examples.potato_shop import build
from frontdesk.experts.providers import FunctionModel, ModelRequest

REPO = Path(__file__).resolve().parents[2]
LONG_USER = "alice-premium-customer-with-a-long-id"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fd.db'}"
        return
    yield str(request.getfixturevalue("fresh_pg_url"))


def _frontdesk(*args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(REPO)}
    env.pop("FRONTDESK_DB", None)
    return subprocess.run(
        [str(Path(sys.executable).parent / "frontdesk"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
    )


def _priced(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "ORDERS", "reason": "buying"}
    if request.expert == "request":
        return {"request": {"variety": "purple", "bags": 1}, "need_more_info": None}
    return "Ok, one bag of purple potatoes: please confirm."


async def _store(url: str) -> list[str]:
    """Facts about a user, and six conversations of other users."""
    orch = build(model="offline", store=url)
    try:
        ids = [
            (await orch.remember(LONG_USER, f"Prefers delivery on day {i} of the week")).id
            for i in range(1, 4)
        ]
        for i in range(6):
            await orch.handle(f"conversation-of-bob-{i}", "A bag of purple potatoes", user_id="bob")
    finally:
        await orch.aclose()
    return ids


def test_memory_show_piped_at_80_columns_prints_every_id_in_full(url: str) -> None:
    ids = asyncio.run(_store(url))
    shown = _frontdesk("memory", "show", LONG_USER, "--db", url)
    assert shown.returncode == 0, shown.stderr
    for memory_id in ids:
        assert memory_id in shown.stdout, shown.stdout
    assert "…" not in shown.stdout and "Prefers delivery on day 3 of the week" in shown.stdout
    forget = _frontdesk("memory", "forget", LONG_USER, ids[0], "--db", url)  # What it is for.
    assert forget.returncode == 0, forget.stderr
    again = _frontdesk("memory", "forget", LONG_USER, ids[0], "--db", url)
    assert again.returncode == 2
    assert "list them with `frontdesk memory show USER`" in " ".join(again.stderr.split())


def test_a_filtered_empty_listing_says_what_the_database_holds(url: str) -> None:
    asyncio.run(_store(url))
    none = _frontdesk("conversations", "--user", "alice", "--db", url)
    assert none.returncode == 0, none.stderr
    assert none.stdout.strip() == "no conversations of user alice (6 in this database)"
    later = _frontdesk("conversations", "--since", "2099-01-01", "--db", url)
    assert later.stdout.strip() == ("no conversations active since 2099-01-01 (6 in this database)")
    listed = _frontdesk("conversations", "--user", "bob", "--db", url)
    for i in range(6):
        assert f"conversation-of-bob-{i}" in listed.stdout, listed.stdout


def test_audit_cost_piped_shows_whole_labels_and_figures(url: str) -> None:
    async def record() -> None:
        from frontdesk.examples.potato_shop import categories
        from frontdesk.orchestrator import Orchestrator

        orch = Orchestrator(categories(), model=FunctionModel(_priced), store=url, memory=False)
        try:
            await orch.handle("order-from-a-premium-customer-0001", "A bag", user_id=LONG_USER)
        finally:
            await orch.aclose()

    asyncio.run(record())
    cost = _frontdesk("audit", "cost", "--all", "--db", url)
    assert cost.returncode == 0, cost.stderr
    assert "…" not in cost.stdout
    assert re.search(r"\d+\.\d{6}", cost.stdout)  # A USD figure in full.
    missing = _frontdesk("audit", "show", "no-such-conversation", "--db", url)
    assert missing.returncode == 2
    assert "`frontdesk conversations` lists them" in " ".join(missing.stderr.split())


HINT = re.compile(r"`frontdesk ([a-z][a-z -]*?(?: --?[a-z][a-z-]*)*)(?: [A-Z.:]+[^`]*)?`")


def test_every_hint_names_a_command_that_exists() -> None:
    """Every `frontdesk ...` in a message, help text or docstring of the code names a
    command, and options, the CLI has."""
    root = typer.main.get_command(app)
    hints: dict[str, str] = {}
    for folder in ("cli", "orchestrator", "threads", "audit", "service", "frontdesk", "experts"):
        for path in (REPO / folder).rglob("*.py"):
            for match in HINT.finditer(" ".join(path.read_text(encoding="utf-8").split())):
                hints[match.group(1).strip()] = str(path.relative_to(REPO))
    assert len(hints) > 10 and "conversations" in hints
    bad = []
    for hint, where in sorted(hints.items()):
        command: Any = root
        words = hint.split()
        while words and words[0] in getattr(command, "commands", {}):
            command = command.commands[words.pop(0)]
        flags = {o for p in command.params for o in getattr(p, "opts", [])}
        unknown = [w for w in words if w.startswith("-") and w not in flags]
        if command is root or unknown:
            bad.append(f"{where}: `frontdesk {hint}`")
    assert bad == [], bad
