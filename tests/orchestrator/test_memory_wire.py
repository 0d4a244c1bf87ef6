"""Memory through the real SDKs against the local wire server: where the block goes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.labels import (
    CUSTOMER_MEMORY_END,
    CUSTOMER_MEMORY_LABEL,
    INSTRUCTION_LABEL,
    VERIFIED_MEMORY_END,
    VERIFIED_MEMORY_LABEL,
)
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


def _alternates(roles: list[str]) -> bool:
    return all(a != b for a, b in zip(roles, roles[1:], strict=False)) and roles[0] == "user"


async def test_anthropic_sends_memory_in_delimited_blocks_of_the_last_user_turn(
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
    # The system text is the prompt alone, byte-identical on every turn (the cached
    # prefix): nothing remembered is ever system text.
    for calls in (triage, response):
        assert len({json.dumps(b["system"]) for b in calls}) == 1
        assert all(len(b["system"]) == 1 for b in calls)
        assert "Prefers replies" not in json.dumps(calls[2]["system"])
    # What was remembered opens the last user turn, inside the customer's block (the
    # memory expert learnt it: their words), before the question; roles still alternate.
    for calls in (triage, response):
        assert _text_of(calls[0]["messages"][-1]["content"]).startswith("Hello! I prefer Hindi.")
        third = _text_of(calls[2]["messages"][-1]["content"])
        block, question = third.split(CUSTOMER_MEMORY_END + "\n\n")
        assert block.startswith(CUSTOMER_MEMORY_LABEL)
        assert "- Prefers replies in Hindi" in block and "- Allergic to peanuts" in block
        assert question.startswith("What do you sell?")
        for body in calls:
            assert _alternates([m["role"] for m in body["messages"]])
    # The memory expert is sent the user's own message, after what is known already.
    first, second = memory
    assert [(m["role"], _text_of(m["content"])) for m in first["messages"]] == [
        ("user", turns[0][1])
    ]
    [(role, said)] = [(m["role"], _text_of(m["content"])) for m in second["messages"]]
    assert role == "user" and said.endswith("\n\n" + turns[1][1])
    assert "Prefers replies in Hindi (key: language)" in said
    for body in memory:
        assert "We sell potatoes" not in json.dumps(body)
    assert sorted(m.text for m in memories) == ["Allergic to peanuts", "Prefers replies in Hindi"]


async def test_openai_sends_memory_in_the_last_user_message_never_as_system(
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
    await orch.remember("sam", "KYC identity check passed")  # The business's record.
    await orch.handle("c1", "I'm allergic to peanuts", user_id="sam")
    await orch.memory.wait()
    await orch.handle("c2", "Any recipe ideas?", user_id="sam")
    await orch.aclose()

    bodies = [r.body for r in wire.requests_to(OPENAI_PATH)]
    assert len(bodies) == 5
    first, later = bodies[1]["messages"], bodies[4]["messages"]
    # The instruction is a labelled block after the question, never an assistant message.
    assert [m["role"] for m in first] == ["system", "user"]
    assert [m["role"] for m in later] == ["system", "user"]
    assert later[0] == first[0]  # The prompt, unchanged, alone in the system role.
    said, _, instruction = later[1]["content"].partition(f"\n\n{INSTRUCTION_LABEL}\n")
    verified, customer, question = said.split("\n\n")
    assert verified == "\n".join(
        [VERIFIED_MEMORY_LABEL, "- KYC identity check passed", VERIFIED_MEMORY_END]
    )
    assert customer == "\n".join(
        [CUSTOMER_MEMORY_LABEL, "- Allergic to peanuts", CUSTOMER_MEMORY_END]
    )
    assert question == "Any recipe ideas?"
    assert instruction and "peanuts" not in instruction  # Not in the instruction.
    assert [m["role"] for m in bodies[2]["messages"]] == ["system", "user"]
    assert bodies[2]["messages"][1]["content"].endswith("\n\nI'm allergic to peanuts")
