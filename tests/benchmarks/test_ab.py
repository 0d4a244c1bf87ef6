"""`make bench BASE=<ref>` (benchmarks/ab.py): the base laid out as the wheel, now / then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.ab import BEGIN, END, ROOT, goals_table, link_tree, medians, table, write_doc
from benchmarks.turns import run_long


def test_the_link_tree_maps_each_folder_to_its_frontdesk_name(tmp_path: Path) -> None:
    tree = link_tree(ROOT, tmp_path / "tree")
    assert (tree / "frontdesk" / "__init__.py").resolve() == ROOT / "frontdesk" / "__init__.py"
    assert (tree / "frontdesk" / "threads").resolve() == ROOT / "threads"
    assert (tree / "frontdesk" / "orchestrator" / "turn.py").exists()
    assert (tree / "benchmarks" / "turns.py").exists()


def test_the_table_gives_now_over_then_per_figure() -> None:
    then = [{"long": {"t10_median_ms": 8.0}, "concurrent": {"turns_per_s": 100.0}}] * 3
    now = [{"long": {"t10_median_ms": 2.0}, "concurrent": {"turns_per_s": 400.0}}] * 3
    now = [{**row, "memory": {"t10_median_ms": 3.0}} for row in now]
    shown = table("abc1234", then, now).splitlines()
    assert shown[0] == "| figure | abc1234 | work tree | now / then |"
    assert "| SQLite turn 10, ms | 8.00 | 2.00 | 0.25x |" in shown
    assert "| SQLite concurrent, turns/s | 100.00 | 400.00 | 4.00x |" in shown
    # A figure the base does not measure (memory on) is shown, with no ratio.
    assert "| SQLite turn 10 with memory, ms | - | 3.00 | - |" in shown
    assert not any("PostgreSQL" in line for line in shown)  # Not measured: not shown.


def _side(t10: float, t1000: float, rate: float) -> dict[str, Any]:
    return {
        "long": {"t10_median_ms": t10, "t1000_median_ms": t1000, "db_mb": 1.0},
        "concurrent": {"turns_per_s": rate},
    }


def test_the_goals_of_both_sides_are_checked_against_one_run_of_the_peers() -> None:
    """`--with-peers`: each side's medians over its rounds, against the same peers."""
    then = medians([_side(9.0, 9.0, 90.0), _side(7.0, 11.0, 110.0), _side(8.0, 10.0, 100.0)])
    assert then["long"]["t10_median_ms"] == 8.0 and then["concurrent"]["turns_per_s"] == 100.0
    now = {**_side(2.0, 2.4, 700.0), "postgres": _side(9.0, 9.5, 250.0)}
    peers = {
        "baseline": {"t10_med_ms": 0.3, "turns_per_s": 5000.0},  # The floor: not a peer.
        "langgraph:sync": {"t10_med_ms": 10.0, "turns_per_s": 100.0},
    }
    shown = goals_table("abc1234", then, now, peers).splitlines()
    assert shown[0] == "| backend | goal | abc1234 | work tree | met here? |"
    assert "| SQLite | turn 10 / best peer's <= 0.3x | 0.80x | 0.20x | yes |" in shown
    assert "| SQLite | 200x5 / best peer's >= 6.0x | 1.00x | 7.00x | yes |" in shown
    assert "| SQLite | turn 1000 / turn 10 <= 1.3x | 1.25x | 1.20x | yes |" in shown
    # PostgreSQL measured here only: no row (a goal is shown before and after, or not).
    assert not any("PostgreSQL" in line for line in shown)


def test_the_doc_keeps_only_the_last_table(tmp_path: Path) -> None:
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n")
    write_doc(doc, "| first |")
    write_doc(doc, "| second |")
    text = doc.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1
    assert "| second |" in text and "| first |" not in text and text.startswith("# Benchmarks")


@pytest.mark.anyio
async def test_the_turn_benchmark_runs_with_a_user_and_memory(tmp_path: Path) -> None:
    figures = await run_long(tmp_path / "memory.db", 15, user_id="u-bench")
    assert figures["turns"] == 15 and figures["t10_median_ms"] > 0


def test_the_instruction_count_has_its_own_row() -> None:
    then = [{"long": {"t10_median_ms": 8.0}, "instructions": {"per_turn_m": 20.0}}]
    now = [{"long": {"t10_median_ms": 8.0}, "instructions": {"per_turn_m": 19.0}}]
    shown = table("abc1234", then, now).splitlines()
    assert "| SQLite instructions per warm turn, millions | 20.00 | 19.00 | 0.95x |" in shown
