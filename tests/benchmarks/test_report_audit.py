"""The report-with-the-audit-log benchmark runs, and the log adds the job experts' cost."""

from __future__ import annotations

import asyncio
from pathlib import Path

from benchmarks.report_audit import run


def test_the_log_adds_the_summariser_and_memory_cost(tmp_path: Path) -> None:
    figures = asyncio.run(run(f"sqlite:///{tmp_path / 'ra.db'}", 3, 1))
    assert figures["conversations"] == 3 and figures["resolved"] == 3  # "that's all, thanks"
    assert figures["model_attempt_rows"] > 0 and figures["ratio"] > 0
    # Each conversation: the memory expert on its first message, one compaction.
    assert figures["job_calls"] == ["memory"] * 3 + ["summariser"] * 3
    assert figures["costs"] == (0.0, 0.0)  # The offline stand-in's model has no price.
