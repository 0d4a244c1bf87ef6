"""Tokens and compaction: the seed's 40-turn chat under four context policies.

Run: `python -m benchmarks.tokens` (or `make bench`, which runs every benchmark).

The seed priced one call per turn with fixed sizes (system prompt 500 tokens, question 50,
answer 250). This benchmark first reproduces its three rows (send everything, a sliding
window of 6 exchanges, a summary + the last 4 exchanges), then runs frontdesk's default
with the same sizes, expert by expert, through frontdesk's own code: the per-expert
budgets (`threads.budget`), the thread layout and cacheable prefix (`threads.builder`),
the compaction policy (`threads.compaction`) and the summariser's request
(`experts.summariser`). Only the model is simulated: a summariser double that keeps
names, numbers and dates, as the summariser prompt asks, in a 300-token summary (the size
the seed assumed, worked out from its own figures).

Cache billing is derived, not assumed: a call reads from the cache the longest prefix
(system prompt + messages, byte-identical) that an earlier call of the same expert marked,
and writes the rest of its own marked prefix, as Anthropic's prompt caching does (5-minute
cache, so the turns are assumed less than 5 minutes apart; prefixes under the model's
1,024-token minimum are not cached; hits are looked for at most 20 blocks back).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from frontdesk.experts.summariser import summariser_messages
from frontdesk.threads.builder import ThreadMessage, UserThread
from frontdesk.threads.compaction import CompactionPolicy

SCENARIO = Path(__file__).resolve().parents[1] / "tests" / "data" / "priya-late-delivery.json"
SYSTEM, QUESTION, ANSWER, SUMMARY, INSTRUCTION = 500, 50, 250, 300, 20
EXPERTS = ("triage", "request", "response", "summariser")
FACT = "88213"


@dataclass(frozen=True)
class Prices:
    """US dollars per million tokens (Anthropic claude-sonnet-4-5, list prices)."""

    model: str = "anthropic:claude-sonnet-4-5"
    input: float = 3.00
    cache_write: float = 3.75
    """1.25x input (5-minute cache)."""
    cache_read: float = 0.30
    """0.1x input."""
    min_cacheable: int = 1_024
    lookback_blocks: int = 20


PRICES = Prices()
HAIKU = Prices(
    model="anthropic:claude-haiku-4-5",
    input=1.00,
    cache_write=1.25,
    cache_read=0.10,
    min_cacheable=4_096,
)
EXPERT_PRICES = {"triage": HAIKU, "request": PRICES, "response": PRICES, "summariser": PRICES}
"""Each expert at its default model (`orchestrator.config.default_model_choice`)."""


class WordCounter:
    """The seed's arithmetic: one token per word, no framing, so sizes are exact."""

    def count(self, text: str) -> int:
        """Words in `text`."""
        return len(text.split())

    def count_messages(self, messages: Iterable[Mapping[str, object]]) -> int:
        """Words in the messages' contents."""
        return sum(self.count(str(m["content"])) for m in messages)


COUNTER = WordCounter()


def words(prefix: str, n: int) -> str:
    """`prefix` padded with filler words to exactly `n` words (one token each)."""
    head = prefix.split()[:n]
    return " ".join(head + ["tok"] * (n - len(head)))


@dataclass
class Billed:
    """Input tokens of calls, split as a provider bills them."""

    uncached: int = 0
    cache_read: int = 0
    cache_write: int = 0
    calls: int = 0
    cost_usd: float = 0.0
    """Dollars billed for the input, cache discounts applied."""
    plain_usd: float = 0.0
    """Dollars for the same input with no caching at all."""

    @property
    def input(self) -> int:
        """All input tokens sent."""
        return self.uncached + self.cache_read + self.cache_write

    def price(self, prices: Prices) -> Billed:
        """Set the dollars of these tokens at `prices` (with and without caching)."""
        self.cost_usd = (
            self.uncached * prices.input
            + self.cache_read * prices.cache_read
            + self.cache_write * prices.cache_write
        ) / 1e6
        self.plain_usd = self.input * prices.input / 1e6
        return self

    def __iadd__(self, other: Billed) -> Billed:
        self.uncached += other.uncached
        self.cache_read += other.cache_read
        self.cache_write += other.cache_write
        self.calls += other.calls
        self.cost_usd += other.cost_usd
        self.plain_usd += other.plain_usd
        return self


@dataclass
class PromptCache:
    """Marked prefixes per expert, as the provider's prompt cache keeps them."""

    prices: Prices = PRICES
    marked: dict[str, list[tuple[tuple[str, ...], int]]] = field(default_factory=dict)

    def bill(
        self, expert: str, system: str, messages: Sequence[Mapping[str, str]], prefix: int
    ) -> Billed:
        """Bill one call whose first `prefix` messages (and system prompt) are marked."""
        blocks = [f"system:{system}", *(f"{m['role']}:{m['content']}" for m in messages)]
        sizes = [COUNTER.count(system), *(COUNTER.count(m["content"]) for m in messages)]
        total = sum(sizes)
        end = 1 + prefix if prefix else 1
        marked_tokens = sum(sizes[:end])
        prices = EXPERT_PRICES.get(expert, self.prices)
        if marked_tokens < prices.min_cacheable:
            return Billed(uncached=total, calls=1).price(prices)
        key = tuple(blocks[:end])
        read = 0
        for cached, tokens in self.marked.get(expert, []):
            hit = len(cached) <= end and key[: len(cached)] == cached
            if hit and end - len(cached) <= prices.lookback_blocks:
                read = max(read, tokens)
        self.marked.setdefault(expert, []).append((key, marked_tokens))
        write = marked_tokens - read
        billed = Billed(uncached=total - marked_tokens, cache_read=read, cache_write=write, calls=1)
        return billed.price(prices)


def scenario_turns() -> list[str]:
    """The user's 40 messages."""
    data: dict[str, Any] = json.loads(SCENARIO.read_text(encoding="utf-8"))
    return [turn["user"] for turn in data["turns"]]


def question(i: int, text: str) -> str:
    """Turn `i`'s question at the seed's size, its real words first."""
    return words(text, QUESTION)


def answer(i: int) -> str:
    """Turn `i`'s answer at the seed's size."""
    return words(f"Answer to question {i}.", ANSWER)


# -- the seed's three policies -----------------------------------------------------------

Layout = tuple[list[dict[str, str]], int]
"""One call: the messages and how many leading ones are marked cacheable."""


def seed_policy(name: str, history: list[dict[str, str]], turn: int, q: str) -> Layout:
    """The messages one call per turn sends under the seed's policies."""
    if name == "everything":
        return [*history, {"role": "user", "content": q}], len(history)
    if name == "window":
        kept = history[-12:]
        return [*kept, {"role": "user", "content": q}], len(kept)
    if name == "summary+4":
        kept = history[-8:]
        # The seed's total (77,800) counts the 300-token summary from turn 5 on, as soon
        # as the 4-exchange window is full; it is rewritten every turn.
        if turn >= 5:
            summary = words(f"Rolling summary as of turn {turn}: order {FACT}.", SUMMARY)
            kept = [{"role": "user", "content": summary}, *kept]
        return [*kept, {"role": "user", "content": q}], len(kept)
    raise ValueError(name)


@dataclass
class PolicyRun:
    """One policy's calls over the 40 turns."""

    name: str
    per_turn: list[dict[str, Billed]] = field(default_factory=list)
    fact_kept_turn_40: bool = False

    def total(self, expert: str | None = None) -> Billed:
        """Summed over turns, for one expert or all."""
        out = Billed()
        for turn in self.per_turn:
            for name, billed in turn.items():
                if expert is None or name == expert:
                    out += billed
        return out

    def last_turn_input(self, expert: str | None = None) -> int:
        """Input tokens sent on turn 40 (by one expert, or all)."""
        turn = self.per_turn[-1]
        return sum(b.input for n, b in turn.items() if expert is None or n == expert)


def run_seed(name: str, *, cache: bool) -> PolicyRun:
    """One call per turn under a seed policy; `cache` marks the stable prefix."""
    system = words("System prompt.", SYSTEM)
    run, prompt_cache = PolicyRun(name), PromptCache()
    history: list[dict[str, str]] = []
    for i, text in enumerate(scenario_turns(), start=1):
        q = question(i, text)
        messages, prefix = seed_policy(name, history, i, q)
        run.per_turn.append(
            {"single": prompt_cache.bill("single", system, messages, prefix if cache else 0)}
        )
        run.fact_kept_turn_40 = any(FACT in m["content"] for m in messages)
        history += [{"role": "user", "content": q}, {"role": "assistant", "content": answer(i)}]
    return run


# -- frontdesk's default ------------------------------------------------------------------

FACTS = re.compile(r"\bI'm [A-Z]\w+|\border \d+|\b\d+ (?:January|February|March|April)\b")


def summariser_double(previous: str | None, evicted: Sequence[Mapping[str, str]]) -> str:
    """A summariser that keeps names, order numbers and dates, in `SUMMARY` tokens."""
    seen: list[str] = []
    for text in [previous or "", *(m["content"] for m in evicted)]:
        for fact in FACTS.findall(text):
            if fact not in seen:
                seen.append(fact)
    return words("Customer facts: " + "; ".join(seen) + ".", SUMMARY)


def run_frontdesk(policy: CompactionPolicy | None = None) -> PolicyRun:
    """frontdesk's default: every expert on every turn, budgets, block compaction, caching."""
    policy = policy or CompactionPolicy()
    system = {e: words(f"System prompt of the {e} expert.", SYSTEM) for e in EXPERTS}
    run, prompt_cache = PolicyRun("frontdesk default"), PromptCache()
    path: list[ThreadMessage] = []
    cut, summary = 0, None
    for i, text in enumerate(scenario_turns(), start=1):
        path.append(ThreadMessage(role="user", content=question(i, text), message_id=f"u{i}"))
        thread = UserThread(summary=summary, messages=path[cut:])
        calls: dict[str, Billed] = {}
        for expert in ("triage", "request", "response"):
            view = thread.for_expert(expert, counter=COUNTER)
            messages = view.messages
            if expert == "response":
                instruction = words("Instruction from the handler.", INSTRUCTION)
                messages = [*messages, {"role": "assistant", "content": instruction}]
            if expert == "request":
                run.fact_kept_turn_40 = any(FACT in m["content"] for m in messages)
            calls[expert] = prompt_cache.bill(
                expert, system[expert], messages, view.cache_prefix_messages
            )
        path.append(ThreadMessage(role="assistant", content=answer(i), message_id=f"a{i}"))
        plan = policy.plan(path[cut:], COUNTER)
        if plan is not None:
            evicted = [{"role": m.role, "content": m.content} for m in plan.evicted]
            request = [
                {"role": m["role"], "content": m["content"]}
                for m in summariser_messages(summary, evicted)  # type: ignore[arg-type]
            ]
            calls["summariser"] = prompt_cache.bill("summariser", system["summariser"], request, 0)
            summary = summariser_double(summary, evicted)
            cut += len(plan.evicted)
        run.per_turn.append(calls)
    return run


# -- the real pipeline ---------------------------------------------------------------------


async def _pipeline(directory: str) -> PolicyRun:
    """The 40 turns through `Orchestrator`, with doubles that bill what they are sent."""
    from frontdesk.examples.potato_shop import build
    from frontdesk.experts.providers import FunctionModel, ModelRequest, ModelResponse, Usage

    run, prompt_cache = PolicyRun("frontdesk pipeline"), PromptCache()
    texts = scenario_turns()
    turn: dict[str, Billed] = {}

    def double(request: ModelRequest) -> ModelResponse:
        messages = [{"role": m["role"], "content": m["content"]} for m in request.messages]
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        # Everything before the new question is what the adapter marks (the stable prefix).
        prefix = 0 if request.expert == "summariser" else users[-1]
        billed = prompt_cache.bill(request.expert, request.system, messages, prefix)
        turn[request.expert] = billed
        last = messages[users[-1]]["content"]
        output: object
        if request.expert == "triage":
            output = {"category": "REFUND" if "refund" in last.lower() else "OTHER", "reason": "-"}
        elif request.expert == "request":
            found = re.findall(r"\b\d{5}\b", " ".join(m["content"] for m in messages))
            run.fact_kept_turn_40 = FACT in found
            missing = {"missing": ["order_number"], "question": "Which order?"}
            output = (
                {"request": {"order_number": found[0]}, "need_more_info": None}
                if found
                else {"request": None, "need_more_info": missing}
            )
        elif request.expert == "summariser":
            output = summariser_double(None, messages)
        else:
            output = answer(len(run.per_turn) + 1)
        if request.output_type is not None:
            output = request.output_type.model_validate(output)
        usage = Usage(
            input_tokens=billed.uncached,
            cache_read_tokens=billed.cache_read,
            cache_write_tokens=billed.cache_write,
        )
        return ModelResponse(output=output, usage=usage, model=PRICES.model)

    orch = build(model=FunctionModel(double), store=f"sqlite:///{directory}/bench.db")
    try:
        for i, text in enumerate(texts, start=1):
            turn = {}
            await orch.handle("priya", question(i, text))
            run.per_turn.append(turn)
            # Compaction runs in the background after the reply; let it finish so its
            # call is billed to this turn, as it would be before the user's next message.
            await orch.drain()
    finally:
        await orch.aclose()
    return run


def run_pipeline() -> PolicyRun:
    """`_pipeline` in a temporary SQLite database."""
    with tempfile.TemporaryDirectory() as directory:
        return asyncio.run(_pipeline(directory))


# -- report -------------------------------------------------------------------------------


def _row(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def report(prices: Prices = PRICES) -> str:
    """The Markdown tables of docs/benchmarks.md ("Tokens and compaction")."""
    seed_rows = {
        "send everything": "everything",
        "sliding window, 6 exchanges": "window",
        "summary + last 4 exchanges": "summary+4",
    }
    lines = [
        *(
            f"- {p.model} (per million input tokens): ${p.input:.2f} uncached,"
            f" ${p.cache_read:.2f} cache read (0.1x), ${p.cache_write:.2f} cache write (1.25x);"
            f" prefixes under {p.min_cacheable:,} tokens are not cached."
            for p in (prices, HAIKU)
        ),
        "- The seed's rows are priced at the first; frontdesk's triage at the second (its"
        " default model), its other experts at the first.",
        "",
        _row(
            [
                "policy",
                "input on turn 40",
                "total input",
                "billed, no caching",
                "billed, prefix marked",
                "order no. sent on turn 40",
            ]
        ),
        _row(["---"] * 6),
    ]
    baseline: dict[str, float] = {}
    for label, name in seed_rows.items():
        plain, cached = run_seed(name, cache=False), run_seed(name, cache=True)
        baseline[label] = plain.total().cost_usd
        lines.append(
            _row(
                [
                    label,
                    f"{plain.last_turn_input():,}",
                    f"{plain.total().input:,}",
                    f"${plain.total().cost_usd:.4f}",
                    f"${cached.total().cost_usd:.4f}",
                    "yes" if plain.fact_kept_turn_40 else "no",
                ]
            )
        )
    fd = run_frontdesk()
    for expert in EXPERTS:
        total = fd.total(expert)
        lines.append(
            _row(
                [
                    f"frontdesk: {expert} ({total.calls} calls)",
                    f"{fd.last_turn_input(expert):,}",
                    f"{total.input:,}",
                    f"${total.plain_usd:.4f}",
                    f"${total.cost_usd:.4f}",
                    ("yes" if fd.fact_kept_turn_40 else "no") if expert == "request" else "",
                ]
            )
        )
    all_experts = fd.total()
    lines.append(
        _row(
            [
                "frontdesk: all experts",
                f"{fd.last_turn_input():,}",
                f"{all_experts.input:,}",
                f"${all_experts.plain_usd:.4f}",
                f"${all_experts.cost_usd:.4f}",
                "",
            ]
        )
    )
    pipe = run_pipeline()
    for expert in EXPERTS:
        total = pipe.total(expert)
        lines.append(
            _row(
                [
                    f"frontdesk pipeline: {expert} ({total.calls} calls)",
                    f"{pipe.last_turn_input(expert):,}",
                    f"{total.input:,}",
                    f"${total.plain_usd:.4f}",
                    f"${total.cost_usd:.4f}",
                    ("yes" if pipe.fact_kept_turn_40 else "no") if expert == "request" else "",
                ]
            )
        )
    piped = pipe.total()
    lines.append(
        _row(
            [
                "frontdesk pipeline: all experts",
                f"{pipe.last_turn_input():,}",
                f"{piped.input:,}",
                f"${piped.plain_usd:.4f}",
                f"${piped.cost_usd:.4f}",
                "",
            ]
        )
    )
    s4 = run_seed("summary+4", cache=False).total()
    lines += ["", "Ratios (frontdesk expert / seed's summary + last 4 exchanges):", ""]
    lines.append(_row(["expert", "total input", "billed with caching"]))
    lines.append(_row(["---"] * 3))
    for expert in EXPERTS[:3]:
        total = fd.total(expert)
        lines.append(
            _row([expert, f"{total.input / s4.input:.2f}", f"{total.cost_usd / s4.cost_usd:.2f}"])
        )
    lines.append(
        _row(
            [
                "all experts",
                f"{all_experts.input / s4.input:.2f}",
                f"{all_experts.cost_usd / s4.cost_usd:.2f}",
            ]
        )
    )
    lines += ["", "Per turn, frontdesk (input tokens sent / of which read from cache):", ""]
    lines.append(_row(["turn", *EXPERTS, "billed, all experts"]))
    lines.append(_row(["---"] * (len(EXPERTS) + 2)))
    for i, calls in enumerate(fd.per_turn, start=1):
        cells: list[object] = [i]
        for expert in EXPERTS:
            b = calls.get(expert)
            cells.append("" if b is None else f"{b.input:,} / {b.cache_read:,}")
        turn_total = Billed()
        for b in calls.values():
            turn_total += b
        cells.append(f"${turn_total.cost_usd:.5f}")
        lines.append(_row(cells))
    return "\n".join(lines)


def main() -> None:
    """Print the report (the compactions' info logs silenced)."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    print(report())


if __name__ == "__main__":
    main()
