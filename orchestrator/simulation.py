"""Simulated customers for conversation tests: a user model plays a persona toward a goal
through the real pipeline, then a judge model gives one verdict per criterion.

    conversations:
      - name: disputes a double charge
        simulate: {persona: "A busy customer, terse", goal: "Get the £12 charged twice back",
                   max_turns: 6}
        expect: {category: DISPUTE, request: {amount: 12}, handler_calls: 1, handoff: false}
        judge: ["The assistant never promises a refund before the handler decided"]

The user and judge are the model map's `"user"` and `"judge"` experts (or a model given to
`run_files`). `expect:` is checked on what the turns returned (deterministic, fit for a
blocking CI job); `judge:` is a model's opinion, each verdict with its reason in the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from frontdesk.errors import ConfigError
from frontdesk.experts.providers import Message, Model, ModelRequest, ModelSettings, PromptRef
from frontdesk.orchestrator._orchestrator import Orchestrator
from frontdesk.orchestrator.reply import Reply
from frontdesk.prompts import load_prompt


class SimulateSpec(BaseModel):
    """Who the simulated customer is and what they want."""

    model_config = ConfigDict(extra="forbid")

    persona: str = Field(min_length=1)
    goal: str = Field(min_length=1)
    max_turns: int = Field(default=6, ge=1, le=50)


class ExpectSpec(BaseModel):
    """What must have happened by the end of a simulated conversation."""

    model_config = ConfigDict(extra="forbid")

    category: str | None = None
    """Some turn was routed to this category."""
    request: dict[str, Any] | None = None
    """The last request extracted (of `category`, when given) has these fields."""
    handler_calls: int | None = Field(default=None, ge=0)
    """How many times a category's handler ran."""
    handoff: bool | None = None
    """Whether the conversation was handed to a person."""


class UserTurn(BaseModel):
    """The simulated customer's next message, and whether they are done."""

    message: str = Field(description="Your next message to the assistant.")
    done: bool = Field(
        default=False, description="True when your goal is reached or cannot be reached."
    )


class Verdict(BaseModel):
    """The judge's verdict on one criterion."""

    criterion: str
    passed: bool
    reason: str = ""


class Verdicts(BaseModel):
    """Every criterion's verdict."""

    verdicts: list[Verdict]


@dataclass
class Exchange:
    """One simulated user message and the bot's reply to it."""

    user: str
    reply: Reply


@dataclass
class Simulated:
    """What a simulated conversation did."""

    exchanges: list[Exchange] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)


def simulation_model(orch: Orchestrator, role: str, given: Model | None) -> Model:
    """The model playing `role` ("user" or "judge"): the one given, else the app's map's.

    Raises:
        ConfigError: neither names one.
    """
    model = given or orch.models.get(role)
    if model is None:
        raise ConfigError(
            f"a simulate: conversation needs a {role!r} model: give the app a model map with a"
            f' "{role}" entry (Orchestrator(model={{"default": ..., "{role}": ...}})) or pass'
            f" --{role} to frontdesk test"
        )
    return model


async def simulate(
    orch: Orchestrator,
    spec: SimulateSpec,
    *,
    user: Model,
    conversation_id: str,
    user_id: str | None,
) -> Simulated:
    """Let `user` talk with the bot for up to `spec.max_turns` messages."""
    prompt = load_prompt("simulated_user").render(persona=spec.persona, goal=spec.goal)
    done = Simulated()
    for index in range(1, spec.max_turns + 1):
        request = ModelRequest(
            expert="user",
            system=prompt.text,
            messages=_as_seen_by_user(done.exchanges),
            output_type=UserTurn,
            settings=ModelSettings(max_tokens=400),
            prompt=PromptRef(name=prompt.name, version=prompt.version, sha256=prompt.sha256),
        )
        turn = UserTurn.model_validate((await user.request(request)).output)
        if turn.done and index > 1:
            break
        text = turn.message.strip() or "..."
        reply = await orch.handle(
            conversation_id, text, user_id=user_id, client_message_id=f"sim-{index}"
        )
        done.exchanges.append(Exchange(user=text, reply=reply))
        if turn.done:
            break
    return done


async def judge(
    judge_model: Model, criteria: Sequence[str], exchanges: Sequence[Exchange]
) -> list[Verdict]:
    """One verdict per criterion (a criterion the judge skipped fails, saying so)."""
    if not criteria:
        return []
    prompt = load_prompt("judge").render(criteria=list(criteria))
    transcript = (
        "\n".join(f"customer: {e.user}\nassistant: {e.reply.text}" for e in exchanges)
        or "(no messages)"
    )
    request = ModelRequest(
        expert="judge",
        system=prompt.text,
        messages=[{"role": "user", "content": f"Transcript:\n{transcript}"}],
        output_type=Verdicts,
        settings=ModelSettings(max_tokens=1024),
        prompt=PromptRef(name=prompt.name, version=prompt.version, sha256=prompt.sha256),
    )
    given = Verdicts.model_validate((await judge_model.request(request)).output).verdicts
    by_criterion = {v.criterion.strip(): v for v in given}
    verdicts = []
    for i, criterion in enumerate(criteria):
        found = by_criterion.get(criterion.strip())
        if found is None and len(given) == len(criteria):
            found = given[i]  # Verdicts in order, criterion reworded.
        verdicts.append(
            Verdict(criterion=criterion, passed=found.passed, reason=found.reason)
            if found is not None
            else Verdict(criterion=criterion, passed=False, reason="the judge gave no verdict")
        )
    return verdicts


def _as_seen_by_user(exchanges: Sequence[Exchange]) -> list[Message]:
    """The conversation from the customer's side: the bot's replies are its user turns."""
    messages: list[Message] = [
        {"role": "user", "content": "(The chat opens. Write your first message.)"}
    ]
    for e in exchanges:
        messages.append({"role": "assistant", "content": e.user})
        messages.append({"role": "user", "content": e.reply.text})
    return messages


def handler_calls(orch: Orchestrator, replies: Sequence[Reply]) -> int:
    """How many turns ran a category's handler (one with a request; a replayed turn did not
    run it again)."""
    return sum(
        r.outcome is not None
        and r.request is not None
        and not r.replayed
        and orch.categories.get(r.category or "") is not None
        for r in replies
    )
