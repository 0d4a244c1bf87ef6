"""The privacy benchmark's pieces run and measure what docs/benchmarks.md reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.privacy import bench_erase, bench_turns

pytestmark = pytest.mark.anyio


async def test_the_privacy_benchmark_times_both_kinds_of_turn_and_an_erasure(
    tmp_path: Path,
) -> None:
    clear, sealed = await bench_turns(tmp_path, 4)
    assert len(clear) == len(sealed) == 4 and min(clear + sealed) >= 0
    seconds, counts = await bench_erase(tmp_path, 3)
    assert seconds > 0 and counts["messages"] == 12 and counts["audit_keys"] == 1
