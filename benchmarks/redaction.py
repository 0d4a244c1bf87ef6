"""What redaction costs the clear-text views, and what it leaves of one account number.

A 12-turn conversation through the potato shop on the offline model, each user message
carrying the same card number, sort code and account number (the issue's telecom test: one
account number copied into most `model_attempt` rows). Figures: the clear copies of the
card and account numbers in the stored rows and in what `audit show` builds from them, with
and without redaction; the time to build that view both ways (the ratio is the cost of
redaction, measured in the same run); and the time one log line spends in the redacting
processor.

    python -m benchmarks.redaction
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from frontdesk.audit.redaction import redact_rows
from frontdesk.audit.store import StoredAuditEvent
from frontdesk.audit.transcript import build_transcript
from frontdesk.examples.potato_shop import categories
from frontdesk.logs import RedactingProcessor
from frontdesk.orchestrator import Orchestrator
from frontdesk.redaction import Redactor

CARD, ACCOUNT = "4111 1111 1111 1111", "31926819"
TEXT = (
    "Hi, I want {n} bags of purple potatoes. Charge card " + CARD + ", or take it from sort code"
    " 12-34-56 account " + ACCOUNT + ". Email me at sam@example.com."
)


async def record(folder: Path, turns: int = 12) -> list[StoredAuditEvent]:
    """The audit rows of one conversation of `turns` turns."""
    orch = Orchestrator(categories(), model="offline", store=f"sqlite:///{folder / 'r.db'}")
    try:
        for n in range(1, turns + 1):
            await orch.handle("bench", TEXT.format(n=n), user_id="u", client_message_id=f"m{n}")
        log = orch.audit_log
        assert log is not None
        return await log.events("bench")
    finally:
        await orch.aclose()


def _copies(text: str) -> int:
    return text.count(CARD) + text.count(ACCOUNT)


def _held(row: StoredAuditEvent) -> str:
    """What a stored row holds: its payload and the content it refers to (texts are stored
    once, by reference, since issue 27; a row still holds them through its references)."""
    return row.payload_json + json.dumps(row.blobs or {})


def _best_ms(work: Any, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def measure(turns: int = 12, repeat: int = 5) -> dict[str, float]:
    """The figures, as a dict (see the module docstring)."""
    with tempfile.TemporaryDirectory() as folder:
        rows = asyncio.run(record(Path(folder), turns))
    redactor = Redactor()
    shown = redact_rows(rows, redactor)
    processor = RedactingProcessor(redactor)
    start = time.perf_counter()
    for n in range(1000):  # A new text each time: nothing comes from the redactor's cache.
        processor(None, "info", {"event": "model_attempt", "error": TEXT.format(n=n)})
    log_us = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    for n in range(1000):  # frontdesk's own lines: ids, names and numbers, no user text.
        processor(
            None,
            "info",
            {
                "event": "model_attempt",
                "expert": "request",
                "attempt": 1,
                "model": "offline",
                "latency_ms": n / 7,
                "request_id": f"r{n}",
            },
        )
    plain_us = (time.perf_counter() - start) * 1000
    clear_ms = _best_ms(lambda: build_transcript("bench", rows), repeat)
    redacted_ms = _best_ms(lambda: build_transcript("bench", redact_rows(rows, redactor)), repeat)
    return {
        "turns": turns,
        "rows": len(rows),
        "rows_with_copies": sum(1 for r in rows if _copies(_held(r))),
        "stored_copies": sum(_copies(_held(r)) for r in rows),
        "shown_copies": sum(
            _copies(json.dumps(r.payload) + (r.system_prompt or "")) for r in shown
        ),
        "view_clear_ms": round(clear_ms, 2),
        "view_redacted_ms": round(redacted_ms, 2),
        "ratio": round(redacted_ms / clear_ms, 1),
        "log_line_us": round(log_us, 1),
        "plain_log_line_us": round(plain_us, 1),
    }


def main() -> None:
    """Print the figures."""
    f = measure()
    print(
        f"{f['turns']} turns, {f['rows']} audit rows; the card and account numbers are stored"
        f" {f['stored_copies']:.0f} times in {f['rows_with_copies']:.0f} rows (no master key),"
        f" shown {f['shown_copies']:.0f} times by the redacted views"
    )
    print(
        f"audit show's view: {f['view_clear_ms']} ms in clear (--reveal),"
        f" {f['view_redacted_ms']} ms redacted ({f['ratio']}x)"
    )
    print(
        f"one log line through RedactingProcessor: {f['plain_log_line_us']} us (ids and"
        f" numbers), {f['log_line_us']} us (an error quoting the user's message)"
    )


if __name__ == "__main__":
    main()
