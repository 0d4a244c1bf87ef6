"""A real model, measured: 20 fixed turns (a potato shop and a bank desk) against a running
OpenAI-compatible server (llama.cpp's `llama-server`, `llama-cpp-python`'s server, vLLM,
Ollama), printing per turn the category, the request, the outcome, the time, the tokens and
what went wrong, then the counts: instructions leaked into replies, hand-offs, failed turns.

Not part of `make test` or `python -m benchmarks` (which skips it without `--model`):

    python -m benchmarks.real_model --model 'openai:smollm2@http://127.0.0.1:8090/v1?output=json_object'

The bank desk is the example bank's card freeze and balance (`frontdesk.examples.bank`);
the rest uses only what every version of frontdesk has (`Orchestrator`, `handle`, `Reply`).
docs/benchmarks.md, "A real model", has a run and how to build the server.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frontdesk import Category, Orchestrator
from frontdesk.errors import FrontdeskError
from frontdesk.examples import bank
from frontdesk.examples.potato_shop import categories as potato_categories

POTATO_TURNS = (
    "Hi there!",
    "I'd like to buy two bags of purple potatoes",
    "Yes, please confirm that order",
    "Where is my order 88213?",
    "It arrived 40 minutes late, I want the delivery fee refunded for order 88213",
    "What potatoes do you sell?",
    "Actually make it three bags of idaho",
    "yes",
    "Can I talk to a person?",
    "Thanks, bye",
)
BANK_TURNS = (
    "Hello",
    "I lost my card, the one ending 4242",
    "Please freeze it",
    "What's my current account balance?",
    "And my savings balance?",
    "Someone charged me twice, I'm furious",
    "Freeze card 1234 too",
    "How do I change my address?",
    "ok thank you",
    "bye",
)


def bank_categories() -> list[Category]:
    """A small bank desk: freeze a card, read a balance (`frontdesk.examples.bank`'s)."""
    return bank.categories(["CARD_FREEZE", "BALANCE"])


@dataclass
class Row:
    """One turn's result."""

    desk: str
    text: str
    category: str = "-"
    request: str = "-"
    outcome: str = "-"
    seconds: float = 0.0
    tokens: int = 0
    handoff: bool = False
    failed: str = ""
    leaked: bool = False
    problems: list[str] = field(default_factory=list)


def leaked(reply: str, instruction: str) -> bool:
    """Whether the reply shows the handler's instruction (its first words, or its verb)."""
    head = instruction.strip()[:40].lower()
    text = reply.lower()
    return bool(head) and (head in text or text.startswith(("tell the user", "ask the user")))


async def run_desk(
    model: str, desk: str, categories: list[Category], turns: tuple[str, ...], folder: Path
) -> list[Row]:
    """The desk's turns in one conversation, each measured."""
    orch = Orchestrator(categories, model=model, store=f"sqlite:///{folder / f'{desk}.db'}")
    rows = []
    try:
        for text in turns:
            row = Row(desk=desk, text=text)
            started = time.perf_counter()
            try:
                reply = await orch.handle(desk, text)
            except FrontdeskError as e:
                row.failed = f"{type(e).__name__}: {str(e)[:90]}"
            else:
                row.category = reply.category or "-"
                if reply.request is not None:
                    row.request = str(reply.request.model_dump(mode="json"))
                elif reply.need_more_info is not None:
                    row.request = f"need {reply.need_more_info.missing}"
                if reply.outcome is not None:
                    row.outcome = reply.outcome.instruction
                    row.leaked = leaked(reply.text, reply.outcome.instruction)
                row.handoff = reply.handoff
                row.tokens = sum(u.input_tokens + u.output_tokens for u in reply.usage.values())
                row.problems = await _problems(orch, desk, reply.user_message_id)
                row.outcome += f" => {reply.text!r}"
            row.seconds = time.perf_counter() - started
            rows.append(row)
            _print(row)
    finally:
        await orch.aclose()
    return rows


async def _problems(orch: Orchestrator, conversation: str, turn_id: str) -> list[str]:
    """What went wrong inside the turn, from its audit rows (failed attempts, notes)."""
    log = orch.audit_log
    if log is None:
        return []
    out = []
    for event in await log.events(conversation):
        if event.turn_id != turn_id:
            continue
        payload: dict[str, Any] = event.payload
        if event.kind == "model_attempt" and payload.get("error"):
            out.append(f"{payload.get('expert')}: {str(payload['error'])[:70]}")
        elif event.kind in ("request_failed", "unreadable", "response_fallback"):
            out.append(f"{event.kind}: {str(payload.get('error', ''))[:70]}")
    return out


def _print(row: Row) -> None:
    flags = ("LEAK " if row.leaked else "") + ("HANDOFF " if row.handoff else "")
    print(
        f"[{row.desk}] {row.seconds:5.1f}s {row.tokens:6d} tok {row.category:12s} {flags}"
        f"{row.failed}\n    user: {row.text}\n    request: {row.request}\n"
        f"    outcome: {row.outcome[:300]}" + "".join(f"\n    ! {p}" for p in row.problems),
        flush=True,
    )


def summary(rows: list[Row]) -> str:
    """The counts of one run, as a Markdown table row body."""
    answered = [r.seconds for r in rows if not r.failed]
    median = statistics.median(answered) if answered else 0.0
    return (
        f"| {len(rows)} | {sum(r.leaked for r in rows)} | {sum(r.handoff for r in rows)} |"
        f" {sum(bool(r.failed) for r in rows)} | {median:.1f} s |"
        f" {sum(r.tokens for r in rows)} |"
    )


async def run(model: str) -> list[Row]:
    """Both desks, one after the other."""
    with tempfile.TemporaryDirectory() as folder:
        rows = await run_desk(model, "potato", potato_categories(), POTATO_TURNS, Path(folder))
        rows += await run_desk(model, "bank", bank_categories(), BANK_TURNS, Path(folder))
    return rows


def main(argv: list[str] | None = None) -> None:
    """Run the 20 turns against `--model`; skipped (by `python -m benchmarks`) without it."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_model")
    parser.add_argument("--model", help="a model spec, e.g. 'openai:NAME@http://HOST:PORT/v1'")
    args, _ = parser.parse_known_args(argv if argv is not None else [])
    if not args.model:
        print("benchmarks.real_model: skipped (needs --model SPEC and a running server)")
        return
    rows = asyncio.run(run(args.model))
    print(
        "\n| turns | leaked instructions | hand-offs | failed turns | median answered |"
        " tokens |\n|---|---|---|---|---|---|"
    )
    print(summary(rows))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
