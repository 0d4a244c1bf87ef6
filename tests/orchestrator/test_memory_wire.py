"""Memory through the real SDKs against the local wire server: where the block goes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.labels import INSTRUCTION_LABEL
from frontdesk.orchestrator import Orchestrator
from tests.experts.providers.wire_server import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    Reply,
    WireServer,
    anthropic_text,
    anthropic_tool,
    openai_completion,
)

pytestmark = pytest.mark.anyio

HINDI = {"facts": [{"text": "Prefers replies in Hindi", "key": "language"}]}
PEANUTS = {"facts": [{"text": "Allergic to peanuts", "key": None}]}
NONE: dict[str, Any] = {"facts": []}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


async def test_anthropic_sends_memory_as_a_block_after_the_cached_system_prompt(
    wire: WireServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    small_talk = Reply(body=anthropic_tool("TriageDecision", {"category": "OTHER", "reason": "x"}))
    turns = [("c1", "Hello! I prefer Hindi.", HINDI), ("c2", "I'm allergic to peanuts", PEANUTS),
             ("c3", "What do you sell?", NONE)]  # fmt: skip
    orch = Orchestrator(potato_categories(), model="anthropic:claude-test", store=db_url)
    for conversation, text, facts in turns:
        learns = facts is not NONE  # A question states no fact: no memory call for it.
        wire.script(
            ANTHROPIC_PATH,
            small_talk,
            Reply(body=anthropic_text("We sell potatoes.")),
            *([Reply(body=anthropic_tool("RememberedFacts", facts))] if learns else []),
        )
        await orch.handle(conversation, text, user_id="priya")
        await orch.memory.wait()
    memories = await orch.memories("priya")
    await orch.aclose()

    bodies = [r.body for r in wire.requests_to(ANTHROPIC_PATH)]
    assert len(bodies) == 8  # 3 turns, 2 of which state a fact (the memory expert runs).
    triage, response, memory = bodies[0::3], bodies[1::3], bodies[2::3]
    # The prompt block is byte-identical on every turn and stays the cached prefix; the
    # memory block follows it, uncached, and only once something is remembered.
    for calls in (triage, response):
        assert len({json.dumps(b["system"][0]) for b in calls}) == 1
        assert all(b["system"][0]["cache_control"] == {"type": "ephemeral"} for b in calls)
        assert len(calls[0]["system"]) == 1
        assert "Prefers replies in Hindi" in calls[1]["system"][1]["text"]
        assert "cache_control" not in calls[1]["system"][1]
        third = calls[2]["system"][1]["text"]
        assert "Prefers replies in Hindi" in third and "Allergic to peanuts" in third
    for body in triage + response:  # Nothing remembered is in any user or assistant turn.
        for message in body["messages"]:
            assert "Prefers replies" not in _text_of(message["content"])
            assert "Allergic to peanuts" not in _text_of(message["content"])
    # The memory expert is sent the user's own message only.
    for body, (_, text, _) in zip(memory, turns[:2], strict=True):
        assert [(m["role"], _text_of(m["content"])) for m in body["messages"]] == [("user", text)]
        assert "We sell potatoes" not in json.dumps(body)
    assert sorted(m.text for m in memories) == ["Allergic to peanuts", "Prefers replies in Hindi"]


async def test_openai_sends_memory_as_a_second_system_message(
    wire: WireServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", wire.url + "/v1")
    for learns in (True, False):  # "Any recipe ideas?" states no fact: no memory call.
        wire.script(
            OPENAI_PATH,
            Reply(body=openai_completion('{"category": "OTHER", "reason": "chat"}')),
            Reply(body=openai_completion("Happy to help.")),
            *([Reply(body=openai_completion(json.dumps(PEANUTS)))] if learns else []),
        )
    models = {"default": "openai:gpt-test", "summariser": "openai:gpt-test"}
    orch = Orchestrator(potato_categories(), model=models, store=db_url)
    await orch.handle("c1", "I'm allergic to peanuts", user_id="sam")
    await orch.memory.wait()
    await orch.handle("c2", "Any recipe ideas?", user_id="sam")
    await orch.aclose()

    bodies = [r.body for r in wire.requests_to(OPENAI_PATH)]
    assert len(bodies) == 5
    first, later = bodies[1]["messages"], bodies[4]["messages"]
    assert [m["role"] for m in first] == ["system", "user"]  # the instruction: a labelled block
    assert [m["role"] for m in later] == ["system", "system", "user"]
    assert later[0] == first[0]  # The prompt, unchanged.
    assert "Allergic to peanuts" in later[1]["content"]
    instruction = later[2]["content"].partition(INSTRUCTION_LABEL)[2]
    assert instruction and "peanuts" not in instruction  # Not in the instruction.
    assert [m["role"] for m in bodies[2]["messages"]] == ["system", "user"]
    assert bodies[2]["messages"][1]["content"] == "I'm allergic to peanuts"
