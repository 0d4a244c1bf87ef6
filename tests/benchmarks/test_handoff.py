"""The hand-off benchmark runs, and a message kept for a person costs less than a bot turn."""

from __future__ import annotations

import asyncio
from pathlib import Path

from benchmarks.handoff import run
from frontdesk.orchestrator import turn


def test_a_held_message_is_cheaper_than_a_bot_turn(tmp_path: Path) -> None:
    original = turn.begin
    figures = asyncio.run(run(tmp_path / "bench.db", 20))
    assert turn.begin is original  # The baseline's patch is undone.
    assert figures["held_message_ms"] < figures["bot_turn_ms"]
    assert figures["read_overhead_ratio"] > 0
