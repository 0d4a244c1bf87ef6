"""Exports: JSONL rows with their hashes, and the HTML page opened in headless Chromium."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from frontdesk.audit.events import AuditEvent
from frontdesk.audit.export import render_html, write_jsonl
from frontdesk.audit.store import AuditLog
from frontdesk.audit.transcript import build_transcript

pytestmark = pytest.mark.anyio

MakeTurn = Callable[..., list[AuditEvent]]
EVIL = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"


async def test_jsonl_has_one_row_per_event_with_hashes(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    await audit_log.append(conv_id, make_turn("t1"))
    rows = await audit_log.events(conv_id)
    out = io.StringIO()
    assert write_jsonl(rows, out) == len(rows) == 8
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [line["seq"] for line in lines] == list(range(1, 9))
    assert lines[1]["prev_hash"] == lines[0]["hash"]
    assert lines[1]["system_prompt"].startswith("You are the triage expert")
    assert lines[0]["payload"]["text"] == "I'd like a bag of purple potatoes"


async def _page(log: AuditLog, conv: str, make_turn: MakeTurn) -> str:
    await log.append(conv, make_turn("t1", reply=EVIL))
    await log.append(conv, make_turn("t2", user_text="two bags please", attempts=2))
    return render_html([build_transcript(conv, await log.events(conv))])


async def test_html_escapes_model_text(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    page = await _page(audit_log, conv_id, make_turn)
    assert EVIL not in page
    assert "&lt;script&gt;document.title=" in page
    assert page.count("<script>") == 1  # only the page's own script
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "headless Chromium is required (apt-get install chromium; .ci/run does it)"
    return path


@pytest.mark.browser
async def test_html_renders_in_headless_chromium(
    conv_id: str, make_turn: MakeTurn, tmp_path: Path
) -> None:
    page = tmp_path / "audit.html"
    async with await AuditLog.open(f"sqlite:///{tmp_path / 'audit.db'}") as log:
        page.write_text(await _page(log, conv_id, make_turn), encoding="utf-8")
    profile = tmp_path / "profile"
    shot = tmp_path / "shot.png"
    common = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        f"--user-data-dir={profile}",
    ]
    with anyio.fail_after(90):
        result = await anyio.run_process([*common, "--dump-dom", page.as_uri()])
    dom = result.stdout.decode()
    # The script ran: it counted 2 turns and 6 expert calls (a retried call is one call).
    assert 'data-rendered="2:6"' in dom
    assert "2 turn(s), 6 expert call(s) rendered" in dom
    assert dom.count('class="turn"') == 2
    assert dom.count('class="call"') == 6
    assert "attempt 2: anthropic:claude-sonnet-4-5, status 200" in dom
    # Tokens, cost and latency charts: a segment per expert call per turn, labelled axes,
    # the wall-clock mark per turn, a legend, and the expand-all key hint.
    assert dom.count('class="bar"') == 3 * 6
    assert dom.count('class="wall"') == 2
    for label in ("Tokens per turn, by expert", "Cost per turn, by expert", ">USD<", ">ms<"):
        assert label in dom
    assert dom.count(">turn</text>") == 3
    assert "wall-clock, retry waits included" in dom and "triage" in dom
    assert "Press <kbd>e</kbd> to expand" in dom
    # The reply's markup stayed text: no injected element, the title untouched.
    assert "<title>frontdesk audit</title>" in dom
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom
    assert '<img src="x"' not in dom
    with anyio.fail_after(90):
        await anyio.run_process(
            [*common, f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()]
        )
    assert shot.stat().st_size > 10_000
