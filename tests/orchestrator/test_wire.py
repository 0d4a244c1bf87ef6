"""The pipeline through the real SDKs: what the HTTP bodies hold (system + thread only)."""

from __future__ import annotations

from typing import Any

import pytest

from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers.anthropic import INSTRUCTION_LABEL
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

TURNS = [
    ("I'd like to buy a bag of purple potatoes", {"variety": "purple", "bags": 1}),
    ("Actually, I want to buy two bags", {"variety": "purple", "bags": 2}),
]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content)


async def test_anthropic_bodies_hold_each_experts_prompt_and_the_same_thread(
    wire: WireServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    for _text, request in TURNS:
        wire.script(
            ANTHROPIC_PATH,
            Reply(body=anthropic_tool("TriageDecision", {"category": "ORDERS", "reason": "buy"})),
            Reply(body=anthropic_tool("OrderRequestExtraction", {"request": request})),
            Reply(body=anthropic_text(f"Please confirm {request['bags']} bag(s).")),
        )
    orch = Orchestrator(potato_categories(), model="anthropic:claude-test", store=db_url)
    replies = [await orch.handle("c", text) for text, _ in TURNS]
    await orch.aclose()

    assert [r.request.model_dump(include={"variety", "bags"}) for r in replies if r.request] == [
        r for _, r in TURNS
    ]
    bodies = [r.body for r in wire.requests_to(ANTHROPIC_PATH)]
    assert len(bodies) == 6
    systems = [_text_of(b["system"]) for b in bodies]
    assert systems[0] == systems[3] and systems[1] == systems[4] and systems[2] == systems[5]
    assert len({systems[0], systems[1], systems[2]}) == 3

    said = [TURNS[0][0], replies[0].text, TURNS[1][0]]
    for body in bodies[3:5]:  # triage and request on turn 2: exactly the thread
        assert [(m["role"], _text_of(m["content"])) for m in body["messages"]] == list(
            zip(["user", "assistant", "user"], said, strict=True)
        )
    response = bodies[5]["messages"]
    assert [m["role"] for m in response] == ["user", "assistant", "user"]
    last_blocks = response[-1]["content"]
    assert last_blocks[0]["text"] == TURNS[1][0]
    assert last_blocks[1]["text"].startswith(INSTRUCTION_LABEL)
    assert "confirm" in last_blocks[1]["text"]
    for body in bodies:
        assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
        for message in body["messages"]:
            assert "ORDERS" not in _text_of(message["content"])  # no triage label in the thread


async def test_openai_bodies_send_the_instruction_as_a_labelled_block_never_as_assistant(
    wire: WireServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", wire.url + "/v1")
    wire.script(
        OPENAI_PATH,
        Reply(body=openai_completion('{"category": "ORDERS", "reason": "buy"}')),
        Reply(body=openai_completion('{"request": {"variety": "purple", "bags": 1}}')),
        Reply(body=openai_completion("Please confirm one bag of purple potatoes.")),
    )
    orch = Orchestrator(potato_categories(), model="openai:gpt-test", store=db_url)
    reply = await orch.handle("c", TURNS[0][0])
    thread = await orch.user_thread("c")
    await orch.aclose()

    bodies = [r.body for r in wire.requests_to(OPENAI_PATH)]
    assert len(bodies) == 3
    for body in bodies[:2]:
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
    response = bodies[2]["messages"]
    assert [m["role"] for m in response] == ["system", "user"]
    question, _, instruction = response[-1]["content"].partition(f"\n\n{INSTRUCTION_LABEL}\n")
    assert question == TURNS[0][0]
    assert "confirm" in instruction.lower()
    assert [(m.role, m.content) for m in thread.messages] == [
        ("user", TURNS[0][0]),
        ("assistant", reply.text),
    ]
    assert all(m.content != instruction for m in thread.messages)


async def test_the_audit_keeps_each_system_prompt_once_not_in_every_wire_body(
    wire: WireServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    wire.script(
        ANTHROPIC_PATH,
        Reply(body=anthropic_tool("TriageDecision", {"category": "OTHER", "reason": "hi"})),
        Reply(body=anthropic_text("Hello!")),
    )
    orch = Orchestrator(potato_categories(), model="anthropic:claude-test", store=db_url)
    await orch.handle("c", "hello")
    log = orch.audit_log
    assert log is not None
    attempts = [e for e in await log.events("c") if e.kind == "model_attempt"]
    await orch.aclose()
    sent = [r.body for r in wire.requests_to(ANTHROPIC_PATH)]
    for event, body in zip(attempts, sent, strict=True):
        system = body["system"][0]["text"]
        assert event.system_prompt == system  # the exact text, stored once by hash
        stored = event.payload["request_body"]
        assert stored["system"][0]["text"].startswith("[system prompt sha256:")
        assert {k: v for k, v in stored.items() if k != "system"} == {
            k: v for k, v in body.items() if k != "system"
        }
