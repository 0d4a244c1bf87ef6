"""Time to the first reply token: a streamed turn against the same turn run sequentially.

The whole pipeline (potato shop, SQLite file, audit) runs with a `LatencyModel` double:
triage 300 ms and request 300 ms to their answer, the response expert 400 ms to its first
token then 50 tokens/s, for a 300-character reply (4 characters a token), on turns whose
category does not change. Four rows, p50 and p95 over `--turns` turns each:

- `stream`: `Orchestrator.stream` with speculative extraction (the default: the request
  expert of the conversation's current category runs alongside triage) - time to the
  first `delta`, and to `done`;
  `its turns 2..`: the same, without each conversation's first turn (which has no
  current category to speculate on);
- `stream, no speculation`: the same with `speculate=False` (triage, then request);
- `sequential`: `Orchestrator.handle` with `speculate=False`, nothing streamed (what
  LangGraph's `invoke` and the Agents SDK's `Runner.run` give by default): the first token
  is shown with the whole reply;
- `lower bound`: the latency model's floor on an unchanged-category turn (triage TTFT +
  response TTFT to the first token; with the request call hidden behind triage).

Then turns whose category changes every turn (ORDERS, ORDER_STATUS, in turn: the
speculative guess is always wrong), streamed, without and with an `EmbeddingRouter` in
front of triage (its embedder modelled: `ROUTER_LATENCY` a call, each message next to its
category): without it, triage, then the request expert, then the response expert; with
it, no triage call.

    python -m benchmarks.stream [--turns 50] [--scale 0.2]

`--scale` shrinks every modelled delay (0.2: 300 ms -> 60 ms) so the run is short; the
figures are reported divided by it, in the model's milliseconds. frontdesk's own overhead
(about 3 ms a turn) is magnified by 1/scale in those figures, so the ratios are
conservative.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog

from frontdesk import EmbeddingRouter
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, Latency, LatencyModel, ModelRequest
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.stream import Delta, Done

REPLY = (
    "Thanks! I have put one bag of purple potatoes aside for you. It ships tomorrow"
    " morning from our farm, and a tracking number will follow by email as soon as the"
    " courier collects it. Is there anything else I can help you with today, for example"
    " a second bag, or a different variety for next week?"
)[:300]
TRIAGE_TTFT, REQUEST_TTFT, RESPONSE_TTFT, TOKENS_PER_SECOND, CHARS_PER_TOKEN = (
    0.3,
    0.3,
    0.4,
    50.0,
    4.0,
)


ORDER, STATUS = "a bag of purple please", "has order 77120 shipped?"
"""The two messages of the changed-category turns (ORDERS, then ORDER_STATUS, in turn)."""
ROUTER_LATENCY = 0.02
"""The modelled embedding of one message by the router (a local all-MiniLM-L6-v2 takes
10-60 ms on one CPU of the 2-core test machine, `benchmarks/router.py`)."""


def _status(request: ModelRequest) -> bool:
    return "77120" in str(request.messages[-1]["content"])


def _answer(request: ModelRequest) -> Any:
    if request.expert == "triage":
        if _status(request):
            return {"category": "ORDER_STATUS", "reason": "where is an order"}
        return {"category": "ORDERS", "reason": "buying potatoes"}
    if request.expert == "request":
        if "OrderStatus" in str(request.output_type):
            return {"request": {"order_number": "77120"}}
        return {"request": {"variety": "purple", "bags": 1}}
    if request.expert == "summariser":
        return "The user orders purple potatoes."
    return REPLY


def _model(scale: float) -> LatencyModel:
    latencies = {
        "triage": Latency(ttft=TRIAGE_TTFT * scale),
        "request": Latency(ttft=REQUEST_TTFT * scale),
        "response": Latency(
            ttft=RESPONSE_TTFT * scale, tokens_per_second=TOKENS_PER_SECOND / scale
        ),
    }
    return LatencyModel(FunctionModel(_answer), latencies, chars_per_token=CHARS_PER_TOKEN)


async def _run(
    turns: int, scale: float, streamed: bool, speculate: bool, db: Path
) -> tuple[list[float], list[float], list[bool]]:
    """Seconds to the first shown token and to the end of each turn; and whether each
    speculative extraction was kept."""
    orch = Orchestrator(
        potato_categories(), model=_model(scale), store=f"sqlite:///{db}", speculate=speculate
    )
    await orch.open()
    firsts: list[float] = []
    totals: list[float] = []
    kept: list[bool] = []
    try:
        for i in range(turns):
            conversation = f"c{i % 10}"  # ten conversations, so no thread grows long
            started = time.perf_counter()
            if streamed:
                first: float | None = None
                async for event in orch.stream(conversation, "a bag of purple please"):
                    if isinstance(event, Delta) and first is None:
                        first = time.perf_counter() - started
                    if isinstance(event, Done):
                        assert event.reply.text == REPLY
                assert first is not None
                firsts.append(first)
            else:
                reply = await orch.handle(conversation, "a bag of purple please")
                assert reply.text == REPLY
                firsts.append(time.perf_counter() - started)
            totals.append(time.perf_counter() - started)
        assert orch.audit_log is not None
        for c in range(min(turns, 10)):
            for row in await orch.audit_log.events(f"c{c}"):
                if row.kind == "speculation":
                    kept.append(bool(row.payload["kept"]))
    finally:
        await orch.aclose()
    return firsts, totals, kept


class _Embedder:
    """The router's embedder, modelled: `ROUTER_LATENCY` a call, and a vector that puts
    each message next to its category's examples (an axis per category's words)."""

    name = "modelled"

    def __init__(self, scale: float) -> None:
        self.scale = scale

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await asyncio.sleep(ROUTER_LATENCY * self.scale)
        return [self._vector(t.lower()) for t in texts]

    @staticmethod
    def _vector(text: str) -> list[float]:
        axes = [("purple", "bag", "buy", "potato"), ("order", "shipped", "where"), ("refund",)]
        v = [float(any(w in text for w in words)) for words in axes] + [0.1]
        norm = sum(x * x for x in v) ** 0.5
        return [x / norm for x in v]


async def _run_changed(turns: int, scale: float, router: bool, db: Path) -> list[float]:
    """Seconds to the first shown token of streamed turns whose category changes every
    turn (speculation on: its guess, the category before, is always wrong), with or without
    the router in front of triage."""
    orch = Orchestrator(
        potato_categories(),
        model=_model(scale),
        store=f"sqlite:///{db}",
        router=EmbeddingRouter(_Embedder(scale), threshold=0.8, margin=0.1) if router else None,
    )
    await orch.open()
    firsts: list[float] = []
    try:
        for i in range(turns):
            started = time.perf_counter()
            first: float | None = None
            # Ten conversations in turn, each alternating between the two categories.
            text = STATUS if (i // 10) % 2 else ORDER
            async for event in orch.stream(f"c{i % 10}", text):
                if isinstance(event, Delta) and first is None:
                    first = time.perf_counter() - started
                if isinstance(event, Done):
                    assert event.reply.routed_by == ("router" if router else "triage")
            assert first is not None
            if i >= 10:  # Each conversation's first turn has no category to change from.
                firsts.append(first)
    finally:
        await orch.aclose()
    return firsts


def _p(values: list[float], q: int, scale: float) -> float:
    """The q-th percentile in the model's milliseconds."""
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[q - 1] / scale * 1000


def measure(turns: int, scale: float) -> dict[str, float]:
    """Run both pipelines; p50/p95 of first token and total, in the model's milliseconds."""
    with tempfile.TemporaryDirectory() as tmp:
        s_first, s_total, kept = asyncio.run(_run(turns, scale, True, True, Path(tmp) / "s.db"))
        n_first, n_total, _ = asyncio.run(_run(turns, scale, True, False, Path(tmp) / "n.db"))
        q_first, q_total, _ = asyncio.run(_run(turns, scale, False, False, Path(tmp) / "q.db"))
        changed = max(turns, 12)
        c_first = asyncio.run(_run_changed(changed, scale, False, Path(tmp) / "c.db"))
        r_first = asyncio.run(_run_changed(changed, scale, True, Path(tmp) / "r.db"))
    figures: dict[str, float] = {}
    for name, values in [
        ("stream_first", s_first),
        ("stream_total", s_total),
        ("later_first", s_first[10:] or s_first),
        ("later_total", s_total[10:] or s_total),
        ("nospec_first", n_first),
        ("nospec_total", n_total),
        ("sequential_first", q_first),
        ("sequential_total", q_total),
        ("changed_first", c_first),
        ("routed_first", r_first),
    ]:
        figures[f"{name}_p50"] = _p(values, 50, scale)
        figures[f"{name}_p95"] = _p(values, 95, scale)
    generation = len(REPLY) / CHARS_PER_TOKEN / TOKENS_PER_SECOND
    figures["bound_first"] = (TRIAGE_TTFT + RESPONSE_TTFT) * 1000
    figures["bound_total"] = figures["bound_first"] + generation * 1000
    figures["first_vs_sequential"] = figures["stream_first_p50"] / figures["sequential_total_p50"]
    figures["first_vs_bound"] = figures["stream_first_p50"] / figures["bound_first"]
    figures["later_vs_bound"] = figures["later_first_p50"] / figures["bound_first"]
    figures["nospec_vs_sequential"] = figures["nospec_first_p50"] / figures["sequential_total_p50"]
    figures["nospec_vs_bound"] = figures["nospec_first_p50"] / figures["bound_first"]
    figures["changed_bound"] = (TRIAGE_TTFT + REQUEST_TTFT + RESPONSE_TTFT) * 1000
    figures["routed_bound"] = (ROUTER_LATENCY + REQUEST_TTFT + RESPONSE_TTFT) * 1000
    figures["routed_vs_changed"] = figures["routed_first_p50"] / figures["changed_first_p50"]
    figures["speculations"] = len(kept)
    figures["speculations_kept"] = sum(kept)
    return figures


def main(argv: list[str] | None = None) -> None:
    """Run both pipelines and print the table and the goals of issue 14."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.stream")
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--scale", type=float, default=0.2)
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    f = measure(args.turns, args.scale)
    print(f"{args.turns} turns each, unchanged category, scale {args.scale} (model ms)")
    print(f"{'pipeline':28} {'first p50':>9} {'first p95':>9} {'total p50':>9} {'total p95':>9}")
    for label, key in [
        ("frontdesk stream", "stream"),
        ("  its turns 2.. (speculated)", "later"),
        ("stream, no speculation", "nospec"),
        ("sequential, not streamed", "sequential"),
    ]:
        print(
            f"{label:28} {f[key + '_first_p50']:9.0f} {f[key + '_first_p95']:9.0f}"
            f" {f[key + '_total_p50']:9.0f} {f[key + '_total_p95']:9.0f}"
        )
    print(
        f"{'lower bound (latency model)':28} {f['bound_first']:9.0f} {f['bound_first']:9.0f}"
        f" {f['bound_total']:9.0f} {f['bound_total']:9.0f}"
    )
    print(f"first token / sequential turn (p50): {f['first_vs_sequential']:.2f}x (goal <= 0.5x)")
    print(f"first token / lower bound (p50):     {f['first_vs_bound']:.2f}x (goal <= 1.15x)")
    print(f"turns 2.. of each conversation / lower bound (p50): {f['later_vs_bound']:.2f}x")
    print(
        f"without speculation: {f['nospec_vs_sequential']:.2f}x the sequential turn,"
        f" {f['nospec_vs_bound']:.2f}x the lower bound"
    )
    print(f"changed-category turns (speculation's guess wrong), {max(args.turns, 12) - 10} each:")
    print(f"{'pipeline':28} {'first p50':>9} {'first p95':>9} {'bound':>9}")
    for label, key, bound in [
        ("triage, then request", "changed", "changed_bound"),
        ("router (no triage call)", "routed", "routed_bound"),
    ]:
        print(
            f"{label:28} {f[key + '_first_p50']:9.0f} {f[key + '_first_p95']:9.0f} {f[bound]:9.0f}"
        )
    print(f"first token with the router / without (p50): {f['routed_vs_changed']:.2f}x")
    print(
        f"speculative extractions kept: {f['speculations_kept']:.0f} of"
        f" {f['speculations']:.0f} (a conversation's first turn has none)"
    )


if __name__ == "__main__":
    main()
