"""Time to the first reply token with and without the review expert (`review=True`).

The potato shop on a SQLite file with the `LatencyModel` double of benchmarks/stream.py
(triage and request 300 ms, the response expert 400 ms to its first token then 50
tokens/s for a 300-character reply), and a review expert answering in 300 ms that approves
every draft. Without review the reply streams as it is written; with review the stream gets
the whole reply once approved (a draft that fails is never shown), so the first token waits
for the whole draft and the verdict. p50 over `--turns` streamed turns, in the model's
milliseconds.

    python -m benchmarks.review [--turns 20] [--scale 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.stream import REPLY, _answer
from benchmarks.stream import _model as stream_model
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, Latency, LatencyModel, ModelRequest
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.stream import Delta, Done

REVIEW_TTFT = 0.3


def _reviewing(scale: float) -> LatencyModel:
    base = stream_model(scale)

    def answer(request: ModelRequest) -> Any:
        return {"approved": True, "note": ""} if request.expert == "review" else _answer(request)

    latencies = {**base.latencies, "review": Latency(ttft=REVIEW_TTFT * scale)}
    return LatencyModel(FunctionModel(answer), latencies, chars_per_token=base.chars_per_token)


async def _run(turns: int, scale: float, review: bool, db: Path) -> list[float]:
    orch = Orchestrator(
        categories(), model=_reviewing(scale), store=f"sqlite:///{db}", review=review
    )
    await orch.open()
    firsts: list[float] = []
    try:
        for i in range(turns):
            started = time.perf_counter()
            first: float | None = None
            async for event in orch.stream(f"c{i % 10}", "a bag of purple please"):
                if isinstance(event, Delta) and first is None:
                    first = time.perf_counter() - started
                if isinstance(event, Done):
                    assert event.reply.text == REPLY and event.reply.reviewed == review
            assert first is not None
            firsts.append(first)
    finally:
        await orch.aclose()
    return firsts


def measure(turns: int = 20, scale: float = 0.2) -> dict[str, float]:
    """p50 time to the first token without and with review, in the model's milliseconds."""
    with tempfile.TemporaryDirectory() as tmp:
        plain = asyncio.run(_run(turns, scale, False, Path(tmp) / "plain.db"))
        reviewed = asyncio.run(_run(turns, scale, True, Path(tmp) / "review.db"))
    return {
        "turns": turns,
        "first_token_ms_without_review": round(statistics.median(plain) / scale * 1000),
        "first_token_ms_with_review": round(statistics.median(reviewed) / scale * 1000),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--scale", type=float, default=0.2)
    args = parser.parse_args()
    print(measure(args.turns, args.scale))


if __name__ == "__main__":
    main()
