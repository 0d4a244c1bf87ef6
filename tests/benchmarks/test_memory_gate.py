"""The memory-gate benchmark runs and measures what it says: both gates on the labelled
set, memory calls on the complaint workload, and the next turn beside background work."""

from __future__ import annotations

from benchmarks.memory_gate import measure, report


def test_the_memory_gate_benchmark_measures_both_gates_in_one_run() -> None:
    figures = measure(turns=6, rounds=1, pairs=1)
    held_out = figures["labelled"]["held_out"]
    assert held_out["gate after"]["precision"] > held_out["gate before"]["precision"]
    assert held_out["gate after"]["n"] >= 50
    complaints = figures["complaints"]
    assert complaints["before"]["calls_per_message"] == 1.0
    assert complaints["after"]["calls_per_message"] == 0.0
    background = figures["background"]
    assert background["after: between"]["inside_share"] == 0.0  # Never inside a turn.
    assert "inside_share" in background["before: inside turns"]
    assert "| held_out | gate after |" in report(figures)
