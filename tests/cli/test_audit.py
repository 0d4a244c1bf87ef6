"""`frontdesk audit show|export|verify|anchor|cost` on a SQLite file with recorded turns."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from frontdesk.audit.store import AuditLog
from frontdesk.cli import app
from tests.audit.conftest import turn_events

runner = CliRunner()


async def _record(url: str) -> None:
    async with await AuditLog.open(url) as log:
        await log.append("conv-a", turn_events("t1", reply="<b>bold</b> reply"))
        await log.append("conv-a", turn_events("t2", user_text="two bags", attempts=2))
        await log.append("conv-b", turn_events("t1"))


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    asyncio.run(_record(url))
    return url


async def _tamper(url: str, sql: str) -> None:
    async with await AuditLog.open(url) as log, log.engine.begin() as conn:
        await conn.execute(text("DROP TRIGGER IF EXISTS audit_event_no_delete"))
        await conn.execute(text(sql))


def test_show_lists_turns_decisions_and_calls(db: str) -> None:
    result = runner.invoke(app, ["audit", "show", "conv-a", "--db", db], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "2 turn(s) on the active path" in out
    assert "I'd like a bag of purple potatoes" in out and "two bags" in out
    assert "ORDERS" in out and '"variety": "purple"' in out
    assert "Ask the user to confirm one bag" in out
    assert "<b>bold</b> reply" in out  # rich markup in model text is shown as text
    assert "triage anthropic:claude-sonnet-4-5 · 2 attempt(s)" in out
    assert "You are the triage expert" not in out  # collapsed without --full


def test_show_full_has_prompts_and_raw_responses(db: str) -> None:
    result = runner.invoke(
        app, ["audit", "show", "conv-a", "--full", "--db", db], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "You are the triage expert. Pick one category." in result.output
    assert "raw response" in result.output and "overloaded" in result.output


def test_show_unknown_conversation_says_what_to_do(db: str) -> None:
    result = runner.invoke(app, ["audit", "show", "nope", "--db", db])
    assert result.exit_code == 2
    assert "no audit rows for conversation 'nope' (2 conversations" in result.output


@pytest.mark.parametrize(
    "command",
    [["verify", "nosuchconv"], ["export", "nosuchconv", "-o", "OUT"], ["cost", "nosuchconv"]],
)
def test_a_typo_in_the_conversation_id_is_an_error(
    db: str, tmp_path: Path, command: list[str]
) -> None:
    """`verify nosuchconv` used to print `ok (0 rows)`; `export` wrote an empty file."""
    out = tmp_path / "out.jsonl"
    args = [str(out) if a == "OUT" else a for a in command]
    result = runner.invoke(app, ["audit", *args, "--db", db])
    assert result.exit_code == 2, result.output
    assert "no audit rows for conversation 'nosuchconv'" in result.output
    assert "ok" not in result.output.split()
    assert not out.exists()


def test_missing_database_file_is_an_error(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["audit", "cost", "--all", "--db", f"sqlite:///{tmp_path / 'none.db'}"]
    )
    assert result.exit_code == 2 and "no database at" in result.output
    assert not (tmp_path / "none.db").exists()


def test_export_jsonl_and_html(db: str, tmp_path: Path) -> None:
    jsonl, html = tmp_path / "all.jsonl", tmp_path / "a.html"
    result = runner.invoke(
        app, ["audit", "export", "--all", "--format", "jsonl", "-o", str(jsonl), "--db", db]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(rows) == 8 + 9 + 8
    assert {r["conversation_id"] for r in rows} == {"conv-a", "conv-b"}
    assert all(len(r["hash"]) == 64 for r in rows)
    result = runner.invoke(
        app, ["audit", "export", "conv-a", "--format", "html", "-o", str(html), "--db", db]
    )
    assert result.exit_code == 0, result.output
    page = html.read_text()
    assert "&lt;b&gt;bold&lt;/b&gt; reply" in page and page.count('class="turn"') == 2
    bad = runner.invoke(app, ["audit", "export", "-o", str(html), "--db", db])
    assert bad.exit_code == 2 and "--all" in bad.output


def test_verify_passes_then_names_the_first_bad_row(db: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["audit", "verify", "--all", "--db", db])
    assert result.exit_code == 0, result.output
    assert "ok   conv-a (17 rows)" in result.output and "ok   conv-b (8 rows)" in result.output
    anchors = tmp_path / "anchors.json"
    assert runner.invoke(app, ["audit", "anchor", "-o", str(anchors), "--db", db]).exit_code == 0
    asyncio.run(_tamper(db, "DELETE FROM audit_event WHERE conversation_id = 'conv-a' AND seq = 4"))
    result = runner.invoke(app, ["audit", "verify", "--all", "--db", db])
    assert result.exit_code == 1
    assert "BAD  conv-a: first bad row seq 4 (missing)" in result.output
    assert "ok   conv-b" in result.output
    one = runner.invoke(app, ["audit", "verify", "conv-b", "--anchors", str(anchors), "--db", db])
    assert one.exit_code == 0, one.output


def test_verify_with_anchor_catches_rewritten_head(db: str, tmp_path: Path) -> None:
    anchors = tmp_path / "anchors.json"
    runner.invoke(app, ["audit", "anchor", "-o", str(anchors), "--db", db])
    asyncio.run(_tamper(db, "DELETE FROM audit_event WHERE conversation_id = 'conv-b' AND seq > 6"))
    asyncio.run(
        _tamper(
            db,
            "UPDATE audit_head SET seq = 6, hash = (SELECT hash FROM"
            " audit_event WHERE conversation_id = 'conv-b' AND seq = 6)"
            " WHERE conversation_id = 'conv-b'",
        )
    )
    assert runner.invoke(app, ["audit", "verify", "conv-b", "--db", db]).exit_code == 0
    result = runner.invoke(
        app, ["audit", "verify", "conv-b", "--anchors", str(anchors), "--db", db]
    )
    assert result.exit_code == 1
    assert "first bad row seq 7 (truncated)" in result.output


def test_cost_per_expert_turn_and_total(db: str) -> None:
    result = runner.invoke(app, ["audit", "cost", "conv-a", "--db", db], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    for heading in ("by expert", "by turn", "total", "cache read"):
        assert heading in out
    assert "#1 t1" in out and "#2 t2" in out
    # Two turns: triage 2 x (1000 x $3 + 20 x $15 + 500 x $0.30) per million, etc.
    assert "0.020896" in out
    everything = runner.invoke(app, ["audit", "cost", "--all", "--db", db], env={"COLUMNS": "200"})
    assert everything.exit_code == 0 and "conv-b #1" in everything.output


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The recorded log on each backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    else:
        url = str(request.getfixturevalue("fresh_pg_url"))
    asyncio.run(_record(url))
    return url


def test_export_all_html_to_a_folder_writes_an_index_of_every_conversation(
    any_db: str, tmp_path: Path
) -> None:
    import os
    import re
    import subprocess
    import sys

    async def tamper() -> None:
        async with await AuditLog.open(any_db) as log, log.engine.begin() as conn:
            if conn.dialect.name == "postgresql":
                await conn.execute(
                    text("ALTER TABLE audit_event DISABLE TRIGGER audit_event_append_only")
                )
            else:
                await conn.execute(text("DROP TRIGGER IF EXISTS audit_event_no_update"))
            await conn.execute(
                text("UPDATE audit_event SET turn_id = 'x' WHERE conversation_id = 'conv-b'")
            )

    asyncio.run(tamper())
    out = tmp_path / "report"
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "frontdesk"), "audit", "export", "--all",
         "--format", "html", "-o", str(out), "--db", any_db],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"to {out / 'index.html'}" in " ".join(done.stdout.split())
    index = (out / "index.html").read_text(encoding="utf-8")
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a>', index)
    assert links == [("conv-a.html", "conv-a"), ("conv-b.html", "conv-b")]
    for href, cid in links:
        page = (out / href).read_text(encoding="utf-8")
        assert f"Conversation {cid}" in page
    rows = re.findall(
        r'<tr class="conversation" data-conversation="([^"]+)" data-verified="(\w+)"', index
    )
    assert rows == [("conv-a", "yes"), ("conv-b", "no")]
    assert re.search(r'conv-a</a></td>\s*<td class="num">2</td>', index)  # Its turns.
    assert "does not verify" in index and "1 do(es) not verify" in index


async def _bank_turns(url: str) -> None:
    """A freeze, a broken handler (turn 2 speculates CARD_FREEZE: discarded), a balance
    filled from a remembered fact."""
    from frontdesk import Orchestrator
    from frontdesk.testing import FunctionModel, ModelRequest
    from tests.orchestrator._bank import CATEGORIES

    routes = iter(["CARD_FREEZE", "BROKEN", "BALANCE"])

    def model(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": next(routes), "reason": "scripted"}
        if request.expert == "request":
            wanted = getattr(request.output_type, "request_model", None)
            name = getattr(wanted, "__name__", "")
            if name == "FreezeCard":
                return {"request": {"last_four": "4242"}}
            if name == "Broken":
                return {"request": {"what": "x"}}
            return {"request": {"account": "savings"}, "from_memory": ["account"]}
        if request.expert == "memory":
            return {"facts": []}
        return "ok"

    orch = Orchestrator(CATEGORIES, model=FunctionModel(model), store=url)
    await orch.remember("bob", "Saves in the savings account", key="account")
    for text_ in ("freeze 4242", "break it", "my balance"):
        await orch.handle("bank", text_, user_id="bob")
    await orch.aclose()


def test_show_marks_a_discarded_speculation_a_handler_traceback_and_memory(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'bank.db'}"
    asyncio.run(_bank_turns(url))
    result = runner.invoke(app, ["audit", "show", "bank", "--db", url], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "request (speculative, discarded: answer not used)" in out
    assert "speculation request for CARD_FREEZE discarded (triage chose BROKEN)" in out
    assert "handler err KeyError: 'missing'" in out
    assert "Traceback (most recent call last)" in out and 'settings["missing"]' in out
    assert '{"account": "savings"} (from memory: account)' in out
