"""The report benchmark's generator and the report agree on every count."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from benchmarks.report import USAGE, expected, run
from frontdesk.audit.pricing import cost_of


def test_the_report_over_generated_conversations_counts_them(tmp_path: Path) -> None:
    figures = asyncio.run(run(f"sqlite:///{tmp_path / 'r.db'}", 120))
    total, want = figures["total"], expected(120)
    assert total["conversations"] == want["conversations"] == 120
    assert total["resolved"] == want["resolved"]
    assert total["assumed_resolved"] == want["assumed_resolved"]
    assert total["handed_off"] == want["handed_off"] == 24
    per_turn = sum(
        cost_of(
            "anthropic:claude-haiku-4-5",
            input_tokens=u["input_tokens"],
            output_tokens=u["output_tokens"],
        ).usd
        for u in USAGE.values()
    )
    assert total["cost_usd"] == pytest.approx(120 * per_turn)
    assert total["ratings"] == 30 and total["comments"] == 10
    assert "<svg" in figures["html"]
