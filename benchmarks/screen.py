"""The heuristic screen (`HeuristicScreen`) on a small labelled set: recall and false positives.

benchmarks/data/screen_labelled.jsonl holds 60 messages written for a bank's chat: prompt
injections (20), off-topic requests (12) and customer messages (28), some of them written to
look like an injection ("Please ignore my previous message", "Forget it, I'll call the
branch"). Figures: the share of injections and of off-topic messages refused (recall), the
share of customer messages refused (false positives), and every message it got wrong.

    python -m benchmarks.screen
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from frontdesk.orchestrator.screen import HeuristicScreen

DATA = Path(__file__).resolve().parent / "data" / "screen_labelled.jsonl"


def labelled() -> list[dict[str, str]]:
    """The labelled messages (`text`, `label`: injection, off_topic or ok)."""
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line]


def measure(screen: HeuristicScreen | None = None) -> dict[str, Any]:
    """Recall per label, the false-positive rate, the misses, and the time per message."""
    screen = screen or HeuristicScreen()
    rows = labelled()
    started = time.perf_counter()
    verdicts = [(row, screen.verdict(row["text"])) for row in rows]
    per_message_us = (time.perf_counter() - started) / len(rows) * 1e6
    figures: dict[str, Any] = {"messages": len(rows), "per_message_us": round(per_message_us, 1)}
    for label in ("injection", "off_topic"):
        of = [v for row, v in verdicts if row["label"] == label]
        figures[f"{label}_recall"] = round(sum(v.action == "refuse" for v in of) / len(of), 3)
        figures[f"{label}_count"] = len(of)
    ok = [v for row, v in verdicts if row["label"] == "ok"]
    figures["ok_count"] = len(ok)
    figures["false_positive_rate"] = round(sum(v.action != "allow" for v in ok) / len(ok), 3)
    figures["wrong"] = [
        {"text": row["text"], "label": row["label"], "verdict": v.reason or v.action}
        for row, v in verdicts
        if (v.action == "allow") != (row["label"] == "ok")
    ]
    return figures


def main() -> None:
    print(json.dumps(measure(), indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
