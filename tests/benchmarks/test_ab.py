"""`make bench BASE=<ref>` (benchmarks/ab.py): the base laid out as the wheel, now / then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.ab import (
    BEGIN,
    END,
    ROOT,
    Round,
    goals_table,
    link_tree,
    rounds_table,
    sides_of_round,
    table,
    write_doc,
)
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


def _side(t10: float, t1000: float, rate: float, memory: float | None = None) -> dict[str, Any]:
    side: dict[str, Any] = {
        "long": {"t10_median_ms": t10, "t1000_median_ms": t1000, "db_mb": 1.0},
        "concurrent": {"turns_per_s": rate},
    }
    if memory is not None:
        side["memory"] = {"t10_median_ms": memory}
    return side


def _unflat(side: dict[str, Any]) -> dict[str, Any]:
    """`side` measured over fewer than 1000 turns (`--turns 130`): no turn 1000."""
    long = {k: v for k, v in side["long"].items() if k != "t1000_median_ms"}
    return {**side, "long": long}


def _peers(langgraph_t10: float) -> dict[str, Any]:
    return {
        "baseline": {"t10_med_ms": 0.3, "turns_per_s": 5000.0},  # The floor: not a peer.
        "langgraph:sync": {"t10_med_ms": langgraph_t10, "turns_per_s": 100.0},
        "agents:w20": {"t10_med_ms": 20.0, "turns_per_s": 80.0},
    }


def test_each_round_is_judged_against_its_own_peers() -> None:
    """`--with-peers`: a ratio is taken within a round, then the rounds' median is shown."""
    rounds = [
        # A slow round: everything took half as long again, the ratios are the same.
        Round(_peers(15.0), _side(12.0, 13.5, 90.0, 12.0), _side(3.0, 3.6, 700.0, 4.5)),
        Round(_peers(10.0), _side(8.0, 9.0, 110.0, 8.0), _side(2.0, 2.4, 650.0, 2.5)),
        Round(_peers(10.0), _side(7.0, 9.0, 100.0, 7.0), _side(3.5, 3.5, 590.0, 2.0)),
    ]
    shown = goals_table("abc1234", rounds).splitlines()
    assert shown[0] == "| backend | goal | abc1234 | work tree | met here |"
    # Here: 3/15, 2/10, 3.5/10 -> 0.20, 0.20, 0.35 (median 0.20), met in two of the three.
    assert "| SQLite | turn 10 / best peer's <= 0.3x | 0.80x | 0.20x | 2 of 3 |" in shown
    # With memory: 4.5/15, 2.5/10, 2/10 -> 0.30, 0.25, 0.20.
    assert (
        "| SQLite | turn 10 with memory / best peer's <= 0.3x | 0.80x | 0.25x | 3 of 3 |" in shown
    )
    # 200x5 against the fastest peer of its round (100 turns/s): 7.0, 6.5, 5.9.
    assert "| SQLite | 200x5 / best peer's >= 6.0x | 1.00x | 6.50x | 2 of 3 |" in shown
    assert "| SQLite | turn 1000 / turn 10 <= 1.3x | 1.12x | 1.20x | 3 of 3 |" in shown
    assert not any("PostgreSQL" in line for line in shown)  # Not measured: not shown.
    short = [Round(r.peers, _unflat(r.then), _unflat(r.now)) for r in rounds]
    assert not any("turn 1000" in line for line in goals_table("abc1234", short).splitlines())
    by_round = rounds_table("abc1234", rounds).splitlines()
    assert by_round[2].startswith("| 1 | 15.00 ms (langgraph:sync) | 0.80x -> 0.20x |")
    assert by_round[4].startswith("| 3 | 10.00 ms (langgraph:sync) | 0.70x -> 0.35x |")
    assert by_round[2].endswith("| - |")  # No PostgreSQL in the round.


def test_postgresql_is_shown_when_both_sides_ran_it() -> None:
    then = {**_side(8.0, 8.0, 100.0), "postgres": _side(12.0, 12.0, 150.0)}
    now = {**_side(2.0, 2.4, 700.0), "postgres": _side(9.0, 9.5, 250.0)}
    shown = goals_table("abc1234", [Round(_peers(10.0), then, now)]).splitlines()
    assert "| PostgreSQL | turn 10 / best peer's <= 1.0x | 1.20x | 0.90x | 1 of 1 |" in shown
    assert "| PostgreSQL | 200x5 / best peer's >= 2.0x | 1.50x | 2.50x | 1 of 1 |" in shown
    # Memory on is measured on SQLite only, and neither side has it here.
    assert not any("with memory" in line for line in shown)
    # PostgreSQL measured here only: no row (a goal is shown before and after, or not).
    only_here = goals_table("abc1234", [Round(_peers(10.0), _side(8.0, 8.0, 100.0), now)])
    assert "PostgreSQL" not in only_here


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


def test_base_and_work_tree_take_turns_at_going_first() -> None:
    """What a side leaves behind (the database server's work after it) never falls on the
    same side every round."""
    orders = [sides_of_round(i) for i in range(4)]
    assert orders == [("base", "here"), ("here", "base")] * 2
