"""The HTML report in a real browser: every chart label fully visible, a person's wait a
series of its own, and the index page of an `export --all`."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import sync_playwright

from frontdesk.audit.events import AuditEvent
from frontdesk.audit.export import IndexEntry, charts, render_html, render_index
from frontdesk.audit.store import AuditLog
from frontdesk.audit.transcript import build_transcript

CHROMIUM = "/usr/bin/chromium"
T0 = datetime(2026, 5, 1, tzinfo=UTC)


def _turn(turn_id: str, at: datetime, tokens: int, *, held_ms: float = 0) -> list[AuditEvent]:
    """One turn: a response call of `tokens` input tokens, or a hand-off a person answers."""

    def ev(kind: Any, ms: float, **payload: Any) -> AuditEvent:
        return AuditEvent(
            kind=kind, turn_id=turn_id, payload=payload, created_at=at + timedelta(milliseconds=ms)
        )

    events = [ev("turn_started", 0, user_message_id=turn_id, text=f"question {turn_id}")]
    if held_ms:
        events += [
            ev("handoff_held", 5, handoff_id="h1", assistant_message_id="w", text="Please wait."),
            ev("operator_reply", held_ms, handoff_id="h1", operator_id="ann",
               assistant_message_id="o", parent_id=turn_id, superseded="w", text="Ann here."),
        ]  # fmt: skip
        return events
    usage = {"input_tokens": tokens, "output_tokens": 20}
    events += [
        ev("model_attempt", 10, expert="response", model="anthropic:claude-sonnet-4-5",
           attempt=1, latency_ms=480.0, usage=usage, messages=[], output="Sure."),
        ev("reply", 500, assistant_message_id=f"a-{turn_id}", text="Sure."),
    ]  # fmt: skip
    return events


def _report(tmp_path: Path) -> tuple[str, Any]:
    async def build() -> Any:
        async with await AuditLog.open(f"sqlite:///{tmp_path / 'audit.db'}") as log:
            for i, (tokens, held) in enumerate([(2960, 0), (1_234_567_880, 0), (0, 9938), (40, 0)]):
                await log.append(
                    "conv-1", _turn(f"t{i}", T0 + timedelta(minutes=i), tokens, held_ms=held)
                )
            return build_transcript("conv-1", await log.events("conv-1"))

    transcript = asyncio.run(build())
    return render_html([transcript]), transcript


def test_chart_labels_are_never_clipped_and_the_wait_is_its_own_series(tmp_path: Path) -> None:
    page_html, transcript = _report(tmp_path)
    shown = charts(transcript.turns)
    latency, waits = shown[2], shown[3]
    assert latency.unit == waits.unit == "ms" and "person" in waits.title
    assert latency.top < 1000 and waits.top == 9933  # From the hand-off to the reply.
    path = tmp_path / "report.html"
    path.write_text(page_html, encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(path.as_uri())
            clipped = page.evaluate(
                """() => {
                  const out = [];
                  for (const svg of document.querySelectorAll("svg.chart")) {
                    const box = svg.getBoundingClientRect();
                    for (const t of svg.querySelectorAll("text")) {
                      const r = t.getBoundingClientRect();
                      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 ||
                          r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5 ||
                          t.getComputedTextLength() < 0.5 * t.textContent.length) {
                        out.push(t.textContent);
                      }
                    }
                  }
                  return out;
                }"""
            )
            labels = page.eval_on_selector_all(
                "svg.chart text.max", "els => els.map(e => e.textContent)"
            )
            charts_shown = page.locator("svg.chart").count()
        finally:
            browser.close()
    assert clipped == []
    assert "1,234,567,900 tokens" in labels  # The longest label, whole.
    assert charts_shown == 4  # tokens, cost, latency, and the wait for a person


def test_the_index_page_links_every_conversation_with_turns_cost_and_verdict(
    tmp_path: Path,
) -> None:
    entries = [
        IndexEntry("conv-1", "conv-1.html", 4, 0.0123, True, True),
        IndexEntry(
            "bad <conv>", "bad%20%3Cconv%3E.html", 1, 0.0, False, False, "row seq 2: edited"
        ),
    ]
    html = render_index(entries)
    path = tmp_path / "index.html"
    path.write_text(html, encoding="utf-8")
    (tmp_path / "conv-1.html").write_text("<title>one</title>", encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(path.as_uri())
            rows = page.eval_on_selector_all(
                "tr.conversation",
                "rs => rs.map(r => [...r.querySelectorAll('td')].map(c => c.textContent.trim()))",
            )
            page.click("text=conv-1")
            title = page.title()
        finally:
            browser.close()
    assert rows[0] == ["conv-1", "4", "0.012300", "verifies"]
    assert rows[1][0] == "bad <conv>" and "does not verify: row seq 2: edited" in rows[1][3]
    assert title == "one"
    assert "1 do(es) not verify" in html
    with pytest.raises(AssertionError):
        assert "<conv>" in html  # Escaped.
