"""The memory gate: which messages the memory expert reads, how well, and what it costs.

Four measurements, each with the gate of before this change (`BEFORE`, kept here verbatim:
a first-person statement or a standing wish passes) and the gate now
(`orchestrator.memory_gate.may_state_a_fact`), in one run:

- **Labelled set** (`benchmarks/data/memory_gate.jsonl`: 375 customer messages, each
  labelled `states_fact`, whether it states a stable fact worth keeping: a preference, a
  circumstance, contact details to keep; `split`: `tune` (300, the gate's cues were tuned on
  them) or `held_out` (75, written after the gate froze, never tuned on)): precision and
  recall of the gate; of the memory expert (the offline model, through the real
  `MemoryExpert` and `MemoryPolicy`) on every message, a message counting as "remembered"
  when at least one fact is kept; and of the gate and the expert together (what is stored).
- **Complaint workload**: a conversation where every message is a first-person complaint
  ("Turn 12: I was charged twice for order A-10012 ...", `benchmarks.turns`), with a user id
  and memory on: memory-expert calls per message, and turn 10's median (turns 6-15) on a
  SQLite file, the memory work running in the background as in production; the two gates
  alternate round by round. The seed scenarios' 44 user messages give a second count.
- **Background work and the next turn**: conversation A states a fact (the memory expert
  runs after its reply); conversation B's next turn starts at once. B's wall time with A's
  memory work pending, against B's when nothing is pending (interleaved), and the CPU of A's
  memory work alone (`time.process_time` around draining it). The claim measured: the
  pending work slows B by no more than its own CPU (the memory expert's model call is
  awaited, its writes are short transactions, nothing holds B's conversation).

    python -m benchmarks.memory_gate [--turns 20] [--rounds 3] [--pairs 30]

Instant fake models (`FunctionModel`), except the labelled set's memory expert (the
offline model), so what is timed is frontdesk's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.turns import BILLING, REPLY, _model, _user_message
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.jobs.runner import Jobs
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator import memory as memory_module
from frontdesk.orchestrator.memory_gate import may_state_a_fact

DATA = Path(__file__).resolve().parent / "data" / "memory_gate.jsonl"
SCENARIOS = Path(__file__).resolve().parents[1] / "tests" / "data"

Gate = Callable[[str], bool]

# -- the gate before (verbatim from orchestrator/memory.py before this change) ------------

_ABOUT_ME = re.compile(r"\b(i|i'm|im|i've|i'd|i'll|me|my|mine|we|we're|we've|our|us)\b")
_STANDING = re.compile(
    r"\b(prefer|preferably|always|never|from now on|in future|in the future|usually|allerg\w*"
    r"|vegan|vegetarian|call me|in the (?:morning|afternoon|evening)|after \d|before \d)\b"
)
_SENTENCE = re.compile(r"[^.!?]+[.!?]*")


def before(text: str) -> bool:
    """The gate before: a sentence that is not a question and speaks of the speaker, or
    states a standing wish."""
    for sentence in _SENTENCE.findall(text.casefold().replace("\u2019", "'")):
        if sentence.rstrip().endswith("?"):
            continue
        if _ABOUT_ME.search(sentence) or _STANDING.search(sentence):
            return True
    return False


GATES: dict[str, Gate] = {"before": before, "after": may_state_a_fact}


@contextmanager
def gate(chosen: Gate) -> Iterator[None]:
    """Turns decide with `chosen` while the block runs (the turn calls the gate through
    `orchestrator.memory`)."""
    kept = memory_module.may_state_a_fact
    memory_module.may_state_a_fact = chosen  # type: ignore[assignment]
    try:
        yield
    finally:
        memory_module.may_state_a_fact = kept


# -- the labelled set ----------------------------------------------------------------------


def labelled() -> list[dict[str, Any]]:
    """The labelled messages (`text`, `states_fact`, `kind`, `split`)."""
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def scores(truth: list[bool], said: list[bool]) -> dict[str, float]:
    """Precision and recall of `said` against `truth`, and the share said yes."""
    tp = sum(t and s for t, s in zip(truth, said, strict=True))
    fp = sum(s and not t for t, s in zip(truth, said, strict=True))
    fn = sum(t and not s for t, s in zip(truth, said, strict=True))
    return {
        "precision": tp / (tp + fp) if tp + fp else 1.0,
        "recall": tp / (tp + fn) if tp + fn else 1.0,
        "passed": (tp + fp) / len(truth),
        "n": len(truth),
    }


async def remembered(texts: list[str]) -> list[bool]:
    """Whether the offline memory expert keeps at least one fact from each text (its facts
    through the default `MemoryPolicy`, as the job stores them)."""
    with tempfile.TemporaryDirectory(prefix="fd-bench-gate-") as folder:
        orch = Orchestrator([BILLING], model="offline", store=f"sqlite:///{folder}/x.db")
        await orch.open()
        try:
            memories = orch._memories  # The opened orchestrator's memory expert and policy.
            assert memories is not None
            found = []
            for text in texts:
                result = await memories.expert.run(text, known=None, metadata={})
                kept = [f for f in result.facts if memories.policy.refusal(f.text, f.key) is None]
                found.append(bool(kept))
            return found
        finally:
            await orch.aclose()


async def classification() -> dict[str, Any]:
    """Gate, expert and both together, per split and over all messages."""
    rows = labelled()
    expert = await remembered([r["text"] for r in rows])
    figures: dict[str, Any] = {}
    for split in ("tune", "held_out", "all"):
        chosen = [i for i, r in enumerate(rows) if split in ("all", r["split"])]
        truth = [rows[i]["states_fact"] for i in chosen]
        by: dict[str, Any] = {"expert alone": scores(truth, [expert[i] for i in chosen])}
        for name, decide in GATES.items():
            passed = [decide(rows[i]["text"]) for i in chosen]
            by[f"gate {name}"] = scores(truth, passed)
            both = [p and expert[i] for p, i in zip(passed, chosen, strict=True)]
            by[f"gate {name} + expert"] = scores(truth, both)
        figures[split] = by
    return figures


# -- the complaint workload ----------------------------------------------------------------


class Counting:
    """`benchmarks.turns`' instant model, counting the memory expert's calls."""

    def __init__(self) -> None:
        self.memory_calls = 0

    def __call__(self, request: ModelRequest) -> Any:
        if request.expert == "memory":
            self.memory_calls += 1
        return _model(request)


async def complaint_run(folder: Path, decide: Gate, turns: int) -> dict[str, float]:
    """One conversation of `turns` complaints with a user id and memory on, deciding with
    `decide`: turn 10's median (turns 6-15, ms) and memory calls per message."""
    model = Counting()
    orch = Orchestrator(
        [BILLING], model=FunctionModel(model), store=f"sqlite:///{folder}/c.db", memory=True
    )
    times = []
    clock = time.process_time()
    try:
        with gate(decide):
            for i in range(1, turns + 1):
                started = time.perf_counter()
                reply = await orch.handle(
                    "conv-long", _user_message(i), client_message_id=f"m-{i}", user_id="u-bench"
                )
                times.append((time.perf_counter() - started) * 1000)
                assert reply.text == REPLY, reply.text
            await orch.memory.wait()
        cpu = (time.process_time() - clock) * 1000 / turns  # The turns and all they left.
    finally:
        await orch.aclose()
    return {
        "t10_ms": statistics.median(times[5:15]),
        "cpu_ms": cpu,
        "calls_per_message": model.memory_calls / turns,
    }


async def complaints(turns: int, rounds: int) -> dict[str, Any]:
    """The two gates in alternating rounds, each on a SQLite file of its own."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in GATES}
    with tempfile.TemporaryDirectory(prefix="fd-bench-gate-") as folder:
        for r in range(rounds):
            for name, decide in GATES.items():
                where = Path(folder) / f"{name}-{r}"
                where.mkdir()
                runs[name].append(await complaint_run(where, decide, turns))
    said = [
        turn["user"]
        for path in sorted(SCENARIOS.glob("*.json"))
        for turn in json.loads(path.read_text())["turns"]
        if turn.get("user")
    ]
    return {
        name: {
            "t10_ms": statistics.median(r["t10_ms"] for r in results),
            "cpu_ms": statistics.median(r["cpu_ms"] for r in results),
            "calls_per_message": statistics.mean(r["calls_per_message"] for r in results),
            "scenario_calls": sum(GATES[name](text) for text in said),
            "scenario_messages": len(said),
        }
        for name, results in runs.items()
    }


# -- background work and the next turn of another conversation -----------------------------

FACT = "I live in Pune and I prefer Hindi, by the way."
COMPLAINT = "I was charged twice for order A-10012, please check it."


class _Facts:
    """The instant model, with a memory expert that finds one fact (its calls counted)."""

    def __init__(self) -> None:
        self.memory_calls = 0

    def __call__(self, request: ModelRequest) -> Any:
        if request.expert == "memory":
            self.memory_calls += 1
            return {"facts": [{"text": "Lives in Pune", "key": "home_city"}]}
        return _model(request)


async def _no_yield(self: Jobs, within: float = 0.0) -> None:
    """`Jobs.quiet` as it was before: the runner starts a job at once, inside a turn."""


async def background(pairs: int, *, yielding: bool = True) -> dict[str, float]:
    """B's turn (ms) with A's memory work pending and with nothing pending, interleaved, and
    the CPU (ms) of A's memory work drained alone; `yielding=False`: the runner starts jobs
    inside turns, as before `Jobs.foreground`."""
    kept = Jobs.quiet
    if not yielding:
        Jobs.quiet = _no_yield  # type: ignore[method-assign]
    try:
        return await _background(pairs)
    finally:
        Jobs.quiet = kept  # type: ignore[method-assign]


async def _background(pairs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="fd-bench-gate-") as folder:
        model = _Facts()
        orch = Orchestrator(
            [BILLING], model=FunctionModel(model), store=f"sqlite:///{folder}/b.db", memory=True
        )
        inside = 0
        pending: list[float] = []
        idle: list[float] = []
        cpu: list[float] = []
        try:
            for i in range(pairs + 3):  # The first three warm up.
                warm = i >= 3
                # Nothing pending: B's turn alone.
                started = time.perf_counter()
                await orch.handle(f"b-{i}", COMPLAINT, user_id=f"ub-{i}")
                if warm:
                    idle.append((time.perf_counter() - started) * 1000)
                # A's memory work alone: its CPU.
                await orch.handle(f"a-{i}", FACT, user_id=f"ua-{i}")
                clock = time.process_time()
                await orch.memory.wait()
                if warm:
                    cpu.append((time.process_time() - clock) * 1000)
                # A's memory work pending while B's next turn runs.
                await orch.handle(f"a2-{i}", FACT, user_id=f"ua2-{i}")
                started, calls = time.perf_counter(), model.memory_calls
                await orch.handle(f"b2-{i}", COMPLAINT, user_id=f"ub2-{i}")
                if warm:
                    pending.append((time.perf_counter() - started) * 1000)
                    inside += model.memory_calls > calls  # A's memory work ran inside B's turn.
                await orch.memory.wait()
        finally:
            await orch.aclose()
    slowdown = statistics.median(pending) - statistics.median(idle)
    job = statistics.median(cpu)
    return {
        "idle_ms": statistics.median(idle),
        "pending_ms": statistics.median(pending),
        "slowdown_ms": slowdown,
        "job_cpu_ms": job,
        "inside_share": inside / pairs,
    }


# -- report ------------------------------------------------------------------------------


def report(figures: dict[str, Any]) -> str:
    """The figures as Markdown tables."""
    lines = [
        "| split | measured | n | precision | recall | share passed |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for split, by in figures["labelled"].items():
        for what, s in by.items():
            lines.append(
                f"| {split} | {what} | {s['n']} | {s['precision']:.2f} | {s['recall']:.2f}"
                f" | {s['passed']:.2f} |"
            )
    c = figures["complaints"]
    lines += [
        "",
        "| complaint workload | before | after | after/before |",
        "|---|---:|---:|---:|",
        f"| memory calls per message | {c['before']['calls_per_message']:.2f}"
        f" | {c['after']['calls_per_message']:.2f} | |",
        f"| SQLite turn 10, memory on (ms) | {c['before']['t10_ms']:.2f}"
        f" | {c['after']['t10_ms']:.2f} | {c['after']['t10_ms'] / c['before']['t10_ms']:.2f}x |",
        f"| CPU per message, the turn and its background work (ms) | {c['before']['cpu_ms']:.2f}"
        f" | {c['after']['cpu_ms']:.2f} | {c['after']['cpu_ms'] / c['before']['cpu_ms']:.2f}x |",
        f"| seed scenarios: memory calls | {c['before']['scenario_calls']} of"
        f" {c['before']['scenario_messages']} | {c['after']['scenario_calls']} of"
        f" {c['after']['scenario_messages']} | |",
    ]
    lines += [
        "",
        "| runner | B's turn, nothing pending (ms) | B's turn, A's memory work pending (ms)"
        " | slowdown (ms) | CPU of A's memory work alone (ms) | slowdown / CPU"
        " | B's turns with A's memory work inside |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, b in figures["background"].items():
        lines.append(
            f"| {name} | {b['idle_ms']:.2f} | {b['pending_ms']:.2f} | {b['slowdown_ms']:.2f}"
            f" | {b['job_cpu_ms']:.2f} | {b['slowdown_ms'] / b['job_cpu_ms']:.2f}"
            f" | {b['inside_share']:.0%} |"
        )
    return "\n".join(lines)


def measure(turns: int, rounds: int, pairs: int) -> dict[str, Any]:
    """Every figure, in one run."""
    return {
        "labelled": asyncio.run(classification()),
        "complaints": asyncio.run(complaints(turns, rounds)),
        "background": asyncio.run(backgrounds(pairs, rounds)),
    }


async def backgrounds(pairs: int, rounds: int) -> dict[str, dict[str, float]]:
    """`background` before (jobs start inside turns) and after (between turns), in
    alternating rounds; the medians of the rounds."""
    runs: dict[str, list[dict[str, float]]] = {"before: inside turns": [], "after: between": []}
    for _ in range(rounds):
        for name, yielding in (("before: inside turns", False), ("after: between", True)):
            runs[name].append(await background(pairs, yielding=yielding))
    return {
        name: {k: statistics.median(r[k] for r in results) for k in results[0]}
        for name, results in runs.items()
    }


def main(argv: list[str] | None = None) -> None:
    """Run the measurements and print Markdown tables (`--json`: the figures as JSON)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory_gate")
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = measure(args.turns, args.rounds, args.pairs)
    print(json.dumps(figures, indent=2) if args.json else report(figures))


if __name__ == "__main__":
    main()
