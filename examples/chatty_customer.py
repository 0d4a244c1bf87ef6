"""The chatty customer (issue 44): a walkthrough of what each expert is sent while a
customer digresses, comes back, corrects a field, cancels, asks two things at once and
thanks the shop in Welsh. `python -m frontdesk.examples.chatty_customer` prints it; the
scenario (`chatty_customer.json`, the format of the shared scenarios plus each turn's
scripted expert answers) is what docs/conversations.md walks through.

The experts' answers are scripted (a `FunctionModel` replaying the scenario's `model`
entries), so every run shows the same routes; the handlers are the potato shop's own.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.reply import Reply

SCENARIO = Path(__file__).with_name("chatty_customer.json")


def scenario() -> dict[str, Any]:
    """The scenario: name, about, turns (user, model, expect)."""
    data: dict[str, Any] = json.loads(SCENARIO.read_text(encoding="utf-8"))
    return data


@dataclass
class Scripted:
    """Answers each expert call from the current turn's `model` entries, in order, and
    keeps what each expert was sent."""

    turn: Mapping[str, list[Any]] = field(default_factory=dict)
    used: dict[str, int] = field(default_factory=dict)
    sent: list[ModelRequest] = field(default_factory=list)

    def start(self, answers: Mapping[str, list[Any]]) -> None:
        self.turn, self.used, self.sent = answers, {}, []

    def __call__(self, request: ModelRequest) -> Any:
        self.sent.append(request)
        if request.expert == "response":
            return f"(the reply written from: {request.messages[-1]['content'][:60]}...)"
        if request.expert == "memory":
            return {"facts": []}
        answers = self.turn.get(request.expert, [])
        index = self.used.get(request.expert, 0)
        self.used[request.expert] = index + 1
        if index >= len(answers):
            raise AssertionError(f"the scenario has no {request.expert} answer #{index + 1}")
        return answers[index]


async def run(store: str, *, show: bool = True) -> list[tuple[Reply, list[ModelRequest]]]:
    """Run the scenario on `store`; each turn's reply and what the experts were sent."""
    script = Scripted()
    # No request expert beside triage (`speculate`): each turn's answers are scripted in order.
    orch = Orchestrator(
        categories(), model=FunctionModel(script), store=store, memory=False, speculate=False
    )
    seen = []
    try:
        for number, turn in enumerate(scenario()["turns"], start=1):
            script.start(turn.get("model", {}))
            reply = await orch.handle("chatty", turn["user"])
            seen.append((reply, list(script.sent)))
            if show:
                print(walkthrough(number, turn["user"], reply, script.sent))
    finally:
        await orch.aclose()
    return seen


def walkthrough(number: int, said: str, reply: Reply, sent: list[ModelRequest]) -> str:
    """One turn as docs/conversations.md shows it."""
    lines = [f"### Turn {number}: “{said}”", ""]
    for request in sent:
        last = request.messages[-1]
        if request.expert == "response":
            lines.append(
                f"- **response** was sent the thread and the instruction: {last['content']!r}"
            )
            continue
        user = [m for m in request.messages if m["role"] == "user"][-1]["content"]
        context = user[: -len(said)].strip() if user.endswith(said) else ""
        lines.append(
            f"- **{request.expert}** was sent {len(request.messages)} turns"
            + (
                f"; the last user turn carries this context before the message: {context!r}"
                if context
                else ""
            )
        )
    lines.append(
        f"- Reply: category={reply.category}, categories={reply.categories},"
        f" pending={reply.pending}, cancelled={reply.cancelled}, clarify={reply.clarify},"
        f" language={reply.language}"
    )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Print the walkthrough (a throwaway SQLite database)."""
    with tempfile.TemporaryDirectory() as folder:
        asyncio.run(run(f"sqlite:///{folder}/chatty.db"))


if __name__ == "__main__":
    main()
