"""`make bench BASE=<ref>` (benchmarks/ab.py): the base laid out as the wheel, now / then."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.ab import BEGIN, END, ROOT, link_tree, table, write_doc
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
