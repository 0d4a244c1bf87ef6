"""What tracing costs a turn: a tracer provider with the SDK's in-memory exporter against no
provider at all, interleaved (goal <= 1.05x).

A process has one global tracer provider, set once, so each arm is a worker process of its
own, started once and warmed up; the parent asks them in turn for a round of turns (ABAB,
then BABA: neither always goes first) and compares the medians of the per-turn times. The
turns are the potato shop's, on a `FunctionModel` that answers at once and a SQLite file
store with the audit log on: the smallest turn there is, so tracing's share is the largest
it can be (a real model call is hundreds of milliseconds more). The traced arm counts the
spans it recorded, to show that it did trace. The process's CPU time a turn (every
thread's) is given beside the wall time: on a shared, loaded machine it is the steadier
of the two.

    python -m benchmarks.telemetry [--rounds 12] [--turns 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

GOAL = 1.05
"""Traced / untraced median turn time."""

WORKER = r"""
import asyncio, json, sys, time
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel
from frontdesk.orchestrator import Orchestrator

traced = sys.argv[2] == "traced"
exporter = None
if traced:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

def answer(request):
    if request.expert == "triage":
        return {"category": "ORDERS", "reason": "buying"}
    if request.expert == "request":
        return {"request": {"variety": "purple", "bags": 1}}
    return "Please press confirm to buy one bag of purple potatoes."

async def main():
    orch = Orchestrator(categories(), model=FunctionModel(answer), store="sqlite:///" + sys.argv[1])
    n = 0
    async def turns(count):
        nonlocal n
        times, cpu = [], []
        for _ in range(count):
            n += 1
            started, used = time.perf_counter(), time.process_time()
            await orch.handle(f"c-{n // 5}", "a bag of purple potatoes", client_message_id=f"m-{n}")
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
        return times, cpu
    await turns(10)  # warm-up: imports, schema, statement caches
    if exporter is not None:
        exporter.clear()
    for line in sys.stdin:
        times, cpu = await turns(int(line))
        spans = 0
        if exporter is not None:
            spans = len(exporter.get_finished_spans())
            exporter.clear()
        print(json.dumps({"times": times, "cpu": cpu, "spans": spans}), flush=True)
    await orch.aclose()

asyncio.run(main())
"""


class _Arm:
    """One worker process, kept running between rounds."""

    def __init__(self, name: str, folder: Path) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(folder / f"{name}.db"), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.spans = 0

    def round(self, turns: int) -> None:
        stdin, stdout = self.proc.stdin, self.proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(f"{turns}\n")
        stdin.flush()
        answer = json.loads(stdout.readline())
        self.times += answer["times"]
        self.cpu += answer["cpu"]
        self.spans += answer["spans"]

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def measure(*, rounds: int = 12, turns: int = 20) -> dict[str, Any]:
    """Both arms, interleaved; median per-turn milliseconds and their ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        arms = {name: _Arm(name, Path(tmp)) for name in ("untraced", "traced")}
        try:
            for i in range(rounds):
                order = ("untraced", "traced") if i % 2 == 0 else ("traced", "untraced")
                for name in order:
                    arms[name].round(turns)
        finally:
            for arm in arms.values():
                arm.close()
    untraced = statistics.median(arms["untraced"].times) * 1000
    traced = statistics.median(arms["traced"].times) * 1000
    cpu_untraced = statistics.mean(arms["untraced"].cpu) * 1000
    cpu_traced = statistics.mean(arms["traced"].cpu) * 1000
    return {
        "turns": rounds * turns,
        "untraced_ms": round(untraced, 3),
        "traced_ms": round(traced, 3),
        "ratio": round(traced / untraced, 3),
        "untraced_cpu_ms": round(cpu_untraced, 3),
        "traced_cpu_ms": round(cpu_traced, 3),
        "cpu_ratio": round(cpu_traced / cpu_untraced, 3),
        "spans_per_turn": arms["traced"].spans / (rounds * turns),
        "untraced_spans": arms["untraced"].spans,
    }


def main(argv: list[str] | None = None) -> None:
    """Print the figures (`make bench` runs this with the defaults)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args(argv)
    f = measure(rounds=args.rounds, turns=args.turns)
    verdict = "met" if f["ratio"] <= GOAL else "NOT met"
    print(
        f"{f['turns']} turns per arm, interleaved: untraced p50 {f['untraced_ms']} ms,"
        f" traced (SDK + in-memory exporter, {f['spans_per_turn']:.1f} spans a turn) p50"
        f" {f['traced_ms']} ms: {f['ratio']}x (goal <= {GOAL}x: {verdict})"
    )
    print(
        f"CPU time a turn (all threads, mean): untraced {f['untraced_cpu_ms']} ms, traced"
        f" {f['traced_cpu_ms']} ms: {f['cpu_ratio']}x"
    )


if __name__ == "__main__":
    main()
