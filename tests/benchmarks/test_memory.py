"""The memory benchmark runs, and what it measures is what a memory turn sends."""

from __future__ import annotations

import asyncio
from pathlib import Path

from benchmarks.memory import _sqlite_urls, run_backend, table


def test_the_memory_benchmark_times_both_kinds_of_turn_and_counts_the_tokens(
    tmp_path: Path,
) -> None:
    results = asyncio.run(run_backend(_sqlite_urls(tmp_path), [3, 200], turns=3))
    few, many = results["3"], results["200"]
    for figures in (few, many):
        assert figures["memory_ms"] > 0 and figures["none_ms"] > 0 and figures["lookup_ms"] > 0
    # Three facts are all sent to every expert; 200 fill each expert's allowance.
    assert set(few["tokens"]) == {"triage", "request", "response"}
    assert few["tokens"]["triage"] == few["tokens"]["response"]
    assert many["tokens"]["triage"] < many["tokens"]["response"]
    assert many["tokens"]["response"] <= 500 + 40  # The allowance, plus the heading.
    assert "| SQLite | 200 |" in table("SQLite", results)
