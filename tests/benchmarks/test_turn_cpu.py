"""The CPU-per-turn benchmark counts every turn and every thread of the process."""

from __future__ import annotations

import pytest

from benchmarks.turn_cpu import run

pytestmark = pytest.mark.anyio


async def test_the_cpu_figures_cover_the_windows_the_run_reaches() -> None:
    figures = await run(20)
    assert figures["turns"] == 20
    assert figures["cpu10_ms"] > 0
    assert "cpu100_ms" not in figures  # Turn 125 was never reached.
    assert figures["cpu_total_ms"] >= 10 * figures["cpu10_ms"] * 0.5
