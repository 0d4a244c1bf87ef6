"""Separation: auditing never changes the thread, and what it records never enters it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

pytestmark = pytest.mark.anyio

# No confirmation: the shop would then draw a random order number, which is not the point.
TURNS = ["I'd like a bag of purple potatoes", "Actually, I want to buy two bags", "two, yes"]


class Team:
    """Deterministic experts: ORDERS, bags from the latest number word, a fixed reply."""

    def __init__(self) -> None:
        self.calls: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> Any:
        self.calls.append(request)
        if request.expert == "triage":
            return {"category": "ORDERS", "reason": "buying"}
        if request.expert == "request":
            last = request.messages[-1]["content"]
            bags = 2 if "two" in last else 1
            return {"request": {"variety": "purple", "bags": bags}, "need_more_info": None}
        if request.expert == "summariser":
            return "summary"
        return f"reply to turn {sum(1 for c in self.calls if c.expert == 'response')}"


async def _run(tmp_path: Path, audit: bool) -> tuple[Orchestrator, Team, str]:
    team = Team()
    orch = Orchestrator(
        categories(),
        model=FunctionModel(team),
        audit=audit,
        store=f"sqlite:///{tmp_path / f'fd-{audit}.db'}",
    )
    for text in TURNS:
        await orch.handle("conv", text, client_message_id=text)
    thread = await orch.user_thread("conv")
    dump = json.dumps(
        {"summary": thread.summary, "messages": [[m.role, m.content] for m in thread.messages]}
    )
    return orch, team, dump


def _sent(team: Team) -> list[str]:
    return [json.dumps([c.expert, c.system, list(c.messages)]) for c in team.calls]


async def test_thread_is_byte_identical_with_audit_on_and_off(tmp_path: Path) -> None:
    on, team_on, thread_on = await _run(tmp_path, audit=True)
    off, team_off, thread_off = await _run(tmp_path, audit=False)
    try:
        assert thread_on.encode() == thread_off.encode()
        assert _sent(team_on) == _sent(team_off)  # the models saw exactly the same requests
        transcript_on = [(m.role, m.content) for m in await on.transcript("conv")]
        transcript_off = [(m.role, m.content) for m in await off.transcript("conv")]
        assert transcript_on == transcript_off and len(transcript_on) == 6
        assert off.audit_log is None
    finally:
        await on.aclose()
        await off.aclose()


async def test_instructions_and_system_prompts_are_audited_never_threaded(
    tmp_path: Path,
) -> None:
    orch, team, thread = await _run(tmp_path, audit=True)
    try:
        assert orch.audit_log is not None
        rows = await orch.audit_log.events("conv")
        instructions = [r.payload["instruction"] for r in rows if r.kind == "outcome"]
        systems = {r.system_prompt for r in rows if r.kind == "model_attempt"}
        assert len(instructions) == 3 and all(instructions)
        assert {c.system for c in team.calls} <= systems  # every system prompt is recorded
        stored = [m.content for m in await orch.transcript("conv")]
        for secret in [*instructions, *systems]:
            assert secret is not None
            assert secret not in thread
            assert all(secret not in content for content in stored)
        # The instruction reached the response expert only, as its trailing message.
        for call in team.calls:
            contents = [m["content"] for m in call.messages]
            leaked = [i for i in dict.fromkeys(instructions) if i in contents]
            assert leaked == ([] if call.expert != "response" else [contents[-1]])
    finally:
        await orch.aclose()
