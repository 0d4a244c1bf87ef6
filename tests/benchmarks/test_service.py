"""The service benchmark runs end to end (SQLite only here: one short server run)."""

from __future__ import annotations

import pytest

from benchmarks.service import measure

pytestmark = pytest.mark.timeout(120)


def test_the_service_benchmark_times_both_paths() -> None:
    figures = measure(turns=20, clients=4, pg=None)
    sqlite = figures["sqlite"]
    assert set(sqlite) == {"direct", "http"}
    for path in ("direct", "http"):
        assert 0 < sqlite[path]["p50"] < 5_000
        assert sqlite[path]["mean"] > 0
    assert "throughput" not in figures
