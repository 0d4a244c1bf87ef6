"""Instructions per warm turn (benchmarks/instructions.py): counted by valgrind, not timed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks.instructions import collected, count, per_turn
from frontdesk.errors import ConfigError

_LOOP = "total = 0\nfor i in range({n}):\n    total += i * i\n"


def test_the_count_is_callgrinds_summary_line() -> None:
    report = "==42== Events    : Ir\n==42== Collected : 7415816644\n==42==\n==42== I   refs: 7,415"
    assert collected(report) == 7_415_816_644
    with pytest.raises(ValueError, match="Collected"):
        collected("==42== valgrind: failed to start tool")


def test_a_program_that_does_more_counts_more_and_the_same_program_counts_the_same(
    tmp_path: Path,
) -> None:
    small = [sys.executable, "-c", _LOOP.format(n=20_000)]
    large = [sys.executable, "-c", _LOOP.format(n=120_000)]
    first, again, more = count(small, tmp_path), count(small, tmp_path), count(large, tmp_path)
    # The load of the machine moves times by a factor of two here; the count barely moves.
    assert abs(first - again) / first < 0.001, (first, again)
    # 100,000 more loop steps: tens of instructions each, on top of the same start-up.
    assert 20 * 100_000 < more - first < 2_000 * 100_000, (first, more)


def test_a_warm_turn_needs_fewer_turns_low_than_high(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="low < high"):
        per_turn(tmp_path, low=80, high=20)
