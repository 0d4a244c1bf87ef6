"""The tracing benchmark compares what it says: one arm traces (4 spans a turn), one does not."""

from __future__ import annotations

from benchmarks.telemetry import measure


def test_the_traced_arm_records_a_turn_span_and_three_chat_spans_a_turn() -> None:
    figures = measure(rounds=2, turns=3)
    assert figures["turns"] == 6
    assert figures["spans_per_turn"] == 4.0  # frontdesk.turn + triage, request, response
    assert figures["untraced_spans"] == 0
    assert figures["ratio"] > 0 and figures["cpu_ratio"] > 0
