"""Transcript views, prices and cost reports built from audit rows alone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from frontdesk.audit.cost import cost_report
from frontdesk.audit.events import AuditEvent
from frontdesk.audit.pricing import cost_of, price_of
from frontdesk.audit.store import AuditLog
from frontdesk.audit.transcript import build_transcript
from frontdesk.examples.potato_shop import categories
from frontdesk.orchestrator import Orchestrator

pytestmark = pytest.mark.anyio

MakeTurn = Callable[..., list[AuditEvent]]


def _started(turn: list[AuditEvent], parent: str | None) -> list[AuditEvent]:
    first = turn[0]
    linked = AuditEvent(
        kind="turn_started",
        turn_id=first.turn_id,
        payload={**first.payload, "parent_id": parent},
        created_at=first.created_at,
    )
    return [linked, *turn[1:]]


async def test_turn_holds_decisions_and_calls_with_retries(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    await audit_log.append(conv_id, make_turn("t1", attempts=3))
    transcript = build_transcript(conv_id, await audit_log.events(conv_id))
    [turn] = transcript.turns
    assert turn.user_text == "I'd like a bag of purple potatoes"
    assert turn.category == "ORDERS" and turn.reason == "buying"
    assert turn.request == {"variety": "purple", "bags": 1}
    assert turn.instruction == "Ask the user to confirm one bag"
    assert turn.reply_text == "Ok great, please press confirm."
    assert [c.expert for c in turn.calls] == ["triage", "request", "response"]
    triage = turn.calls[0]
    assert [a.number for a in triage.attempts] == [1, 2, 3]
    assert [a.status_code for a in triage.attempts] == [529, 529, 200]
    assert triage.ok and triage.latency_ms == pytest.approx(3 * 120.5)
    assert triage.attempts[0].system_prompt == "You are the triage expert. Pick one category."
    # sonnet-4-5: 1000 in x $3 + 20 out x $15 + 500 cache read x $0.30 per million.
    assert triage.cost.usd == pytest.approx((1000 * 3 + 20 * 15 + 500 * 0.30) / 1e6)
    assert turn.tokens.total == (1000 + 20 + 500) + (2000 + 30) + (1500 + 40 + 1000 + 200)


def test_active_path_follows_parent_links(make_turn: MakeTurn) -> None:
    t1 = _started(make_turn("u1"), None)
    t2 = _started(make_turn("u2", user_text="two bags"), "a-u1")
    t2b = _started(make_turn("u2b", user_text="three bags (edited)"), "a-u1")  # an edit
    rows = []
    for seq, event in enumerate([*t1, *t2, *t2b], start=1):
        rows.append(_Row(seq, event))
    transcript = build_transcript("c", rows)
    assert [t.turn_id for t in transcript.turns] == ["u1", "u2", "u2b"]
    assert [t.turn_id for t in transcript.active] == ["u1", "u2b"]


def test_without_links_a_regenerated_turn_shows_once(make_turn: MakeTurn) -> None:
    events = [*make_turn("u1"), *make_turn("u2"), *make_turn("u2", reply="another answer")]
    transcript = build_transcript("c", [_Row(i, e) for i, e in enumerate(events, start=1)])
    assert len(transcript.turns) == 3
    assert [t.reply_text for t in transcript.active] == [
        "Ok great, please press confirm.",
        "another answer",
    ]


def test_price_table_matches_dated_names_and_flags_unknown_models() -> None:
    assert price_of("anthropic:claude-sonnet-4-5-20250929") == price_of(
        "anthropic:claude-sonnet-4-5"
    )
    assert price_of("openai:gpt-4.1-mini") != price_of("openai:gpt-4.1")
    assert cost_of("openai:llama3@http://localhost:8000/v1", input_tokens=10**6).known is False
    unknown = cost_of("function:my_double", input_tokens=10**6, output_tokens=10)
    assert (unknown.usd, unknown.known) == (0.0, False)
    assert cost_of("offline", input_tokens=10**6).known is True
    gpt = cost_of(
        "openai:gpt-4.1-mini", input_tokens=10**6, output_tokens=10**6, cache_read_tokens=10**6
    )
    assert gpt.usd == pytest.approx(0.40 + 1.60 + 0.10)


def test_cost_report_per_expert_turn_and_total(make_turn: MakeTurn) -> None:
    events = [*make_turn("u1", attempts=2), *make_turn("u2")]
    rows = [_Row(i, e) for i, e in enumerate(events, start=1)]
    report = cost_report([build_transcript("c", rows)])
    assert list(report.by_expert) == ["request", "response", "triage"]
    assert report.by_expert["triage"].calls == 2 and report.by_expert["triage"].attempts == 3
    assert report.by_expert["response"].tokens.cache_read == 2000
    assert len(report.by_turn) == 2
    assert report.total.usd == pytest.approx(sum(line.usd for line in report.by_turn))
    assert report.total.usd == pytest.approx(sum(e.usd for e in report.by_expert.values()))
    assert report.unknown_models == set()


class _Row:
    """A stored-row stand-in for pure transcript tests (no database needed)."""

    def __init__(self, seq: int, event: AuditEvent) -> None:
        # The columns verification reads (`AuditRow`), unused by the views.
        self.conversation_id, self.event_id, self.payload_json = "c", event.event_id, ""
        self.prompt_sha256: str | None = None
        self.prev_hash = self.hash = ""
        self.seq = seq
        self.kind = event.kind
        self.turn_id = event.turn_id
        self.created_at = event.created_at.isoformat()
        self.payload = event.payload
        self.system_prompt = event.system_prompt


@pytest.mark.anyio
async def test_a_regenerated_turn_shows_the_decisions_it_reused(tmp_path: Path) -> None:
    """After a regeneration the active path's turn is not empty (`audit show` without
    --all-branches): it shows the category, request and instruction it reused."""
    orch = Orchestrator(categories(), model="offline", store=f"sqlite:///{tmp_path / 'r.db'}")
    try:
        reply = await orch.handle("c-r", "where is order 77120?", user_id="u")
        await orch.regenerate(reply.message_id, user_id="u")
        log = orch.audit_log
        assert log is not None
        transcript = build_transcript("c-r", await log.events("c-r"))
    finally:
        await orch.aclose()
    (turn,) = transcript.active
    assert "outcome_reused" in turn.events
    assert turn.category == "ORDER_STATUS" and turn.request == {"order_number": "77120"}
    assert turn.instruction and "77120" in turn.instruction
