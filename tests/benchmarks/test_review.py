"""The review benchmark runs both pipelines (every reply reviewed and approved on one)."""

from __future__ import annotations

from benchmarks.review import measure


def test_the_review_benchmark_measures_both() -> None:
    figures = measure(turns=2, scale=0.02)
    assert figures["turns"] == 2
    assert figures["first_token_ms_without_review"] > 0
    assert figures["first_token_ms_with_review"] > 0
