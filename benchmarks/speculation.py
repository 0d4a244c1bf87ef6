"""Speculative extraction on the seed's conversations: how often the guess is kept, and
what the discarded guesses cost.

Each scenario (`tests/data/*.json`, copies of the shared seed scenarios) runs once with
speculation and once without, through the potato shop on the offline model (deterministic,
no network; its token counts are its own estimate, about 4 characters a token). The hit
rate is kept guesses over guesses (a first turn has nothing to guess); the extra tokens are
the request-expert tokens of the discarded guesses, and the difference in all tokens billed
between the two runs.

    python -m benchmarks.speculation
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from frontdesk.examples.potato_shop import categories
from frontdesk.orchestrator import Orchestrator

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
SCENARIOS = ("potatoes.json", "priya-late-delivery.json")


def _turns(name: str) -> list[str]:
    scenario = json.loads((DATA / name).read_text(encoding="utf-8"))
    return [turn["user"] for turn in scenario["turns"]]


def _tokens(usage: dict[str, Any] | None) -> int:
    usage = usage or {}
    return int(usage.get("input_tokens", 0)) + int(usage.get("output_tokens", 0))


async def run(texts: list[str], *, speculate: bool, folder: Path) -> dict[str, int]:
    """One conversation of `texts`; the speculation notes and tokens its audit log holds."""
    db = folder / f"speculate-{speculate}.db"
    orch = Orchestrator(categories(), model="offline", store=f"sqlite:///{db}", speculate=speculate)
    try:
        for i, text in enumerate(texts):
            await orch.handle("scenario", text, user_id="u", client_message_id=f"m-{i}")
            # The background work (compaction, memory) done before the next message: both
            # runs see the same thread whatever the machine's speed.
            await orch.drain()
        log = orch.audit_log
        assert log is not None
        events = await log.events("scenario")
    finally:
        await orch.aclose()
    notes = [e.payload for e in events if e.kind == "speculation"]
    attempts = [e.payload for e in events if e.kind == "model_attempt"]
    return {
        "turns": len(texts),
        "guesses": len(notes),
        "kept": sum(1 for n in notes if n.get("kept")),
        "discarded_tokens": sum(_tokens(n.get("usage")) for n in notes if not n.get("kept")),
        "tokens": sum(_tokens(a.get("usage")) for a in attempts),
    }


async def measure() -> dict[str, dict[str, Any]]:
    """Per scenario: the speculating run's figures, and the tokens of the run without."""
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            texts = _turns(name)
            folder = Path(tmp) / name.removesuffix(".json")
            folder.mkdir()
            on = await run(texts, speculate=True, folder=folder)
            off = await run(texts, speculate=False, folder=folder)
            on["tokens_without"] = off["tokens"]
            on["hit_rate_pct"] = round(100 * on["kept"] / on["guesses"]) if on["guesses"] else 0
            out[name.removesuffix(".json")] = on
    return out


def main() -> None:
    figures = asyncio.run(measure())
    print("scenario | turns | guesses | kept | hit rate | discarded-guess tokens | tokens on / off")
    for name, f in figures.items():
        extra = f["tokens"] - f["tokens_without"]
        print(
            f"{name} | {f['turns']} | {f['guesses']} | {f['kept']} | {f['hit_rate_pct']}% |"
            f" {f['discarded_tokens']} | {f['tokens']} / {f['tokens_without']} ({extra:+d})"
        )


if __name__ == "__main__":
    main()
