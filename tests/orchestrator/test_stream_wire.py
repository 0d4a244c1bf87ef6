"""`Orchestrator.stream` through the real SDKs: the response expert streams over SSE."""

from __future__ import annotations

import pytest

from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.stream import Delta, Done, Failed, TurnEvent
from tests.experts.providers.wire_server import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    Reply,
    WireServer,
    anthropic_sse,
    anthropic_tool,
    openai_completion,
    openai_sse,
)

pytestmark = pytest.mark.anyio

TEXTS = ["Please confirm ", "one bag ", "of purple ", "potatoes ", "for delivery ", "tomorrow."]


def joined(events: list[TurnEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, Delta))


def script_anthropic(wire: WireServer, response: Reply) -> None:
    wire.script(
        ANTHROPIC_PATH,
        Reply(body=anthropic_tool("TriageDecision", {"category": "ORDERS", "reason": "buy"})),
        Reply(
            body=anthropic_tool(
                "OrderRequestExtraction", {"request": {"variety": "purple", "bags": 1}}
            )
        ),
        response,
    )


async def test_anthropic_turn_streams_the_provider_chunks_and_audits_first_token(
    wire: WireServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    script_anthropic(wire, Reply(sse=anthropic_sse(TEXTS)))
    orch = Orchestrator(potato_categories(), model="anthropic:claude-test", store=db_url)

    events = [e async for e in orch.stream("c", "a bag of purple please")]
    log = orch.audit_log
    assert log is not None
    attempts = [e for e in await log.events("c") if e.kind == "model_attempt"]
    await orch.aclose()

    assert [e.type for e in events][:2] == ["routed", "extracted"]
    # The provider's chunks, one delta each (a chunk's trailing space moves to the next).
    assert [e.text for e in events if isinstance(e, Delta)] == [
        TEXTS[0].rstrip(),
        *(" " + t.rstrip() for t in TEXTS[1:]),
    ]
    done = events[-1]
    assert isinstance(done, Done) and joined(events) == done.reply.text == "".join(TEXTS)
    bodies = [r.body for r in wire.requests_to(ANTHROPIC_PATH)]
    assert [b.get("stream", False) for b in bodies] == [False, False, True]
    response_row = attempts[-1].payload
    assert response_row["expert"] == "response"
    assert 0 < response_row["first_token_ms"] <= response_row["latency_ms"]
    assert "".join(TEXTS) in str(response_row["response_body"])
    assert response_row["output"] == "".join(TEXTS)
    assert all("first_token_ms" not in a.payload for a in attempts[:-1])


async def test_openai_turn_streams_with_usage_from_the_last_chunk(
    wire: WireServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", wire.url + "/v1")
    usage = {"prompt_tokens": 120, "completion_tokens": 12, "total_tokens": 132}
    wire.script(
        OPENAI_PATH,
        Reply(body=openai_completion('{"category": "ORDERS", "reason": "buy"}')),
        Reply(body=openai_completion('{"request": {"variety": "purple", "bags": 1}}')),
        Reply(sse=openai_sse(TEXTS, usage=usage)),
    )
    orch = Orchestrator(potato_categories(), model="openai:gpt-test", store=db_url)
    events = [e async for e in orch.stream("c", "a bag of purple please")]
    await orch.aclose()

    done = events[-1]
    assert isinstance(done, Done) and joined(events) == done.reply.text
    assert done.reply.usage["response"].output_tokens == 12
    assert done.reply.usage["response"].input_tokens == 120
    body = wire.requests_to(OPENAI_PATH)[-1].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


async def test_a_stream_stalled_past_the_turn_deadline_fails_partial_and_keeps_the_message(
    wire: WireServer, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    stalled = Reply(sse=anthropic_sse(TEXTS), stall_after=6, stall_seconds=3)
    script_anthropic(wire, stalled)
    orch = Orchestrator(
        potato_categories(), model="anthropic:claude-test", store=db_url, turn_deadline=1.0
    )
    events = [e async for e in orch.stream("c", "a bag of purple please", client_message_id="k")]
    after = await orch.transcript("c")

    failed = events[-1]
    assert isinstance(failed, Failed) and failed.partial
    assert failed.error.stage == "deadline"
    assert joined(events) == "".join(TEXTS[:3]).rstrip()
    # The partial text is not stored: the failed turn's marker holds the safe reply.
    assert [(m.role, m.failed) for m in after] == [("user", False), ("assistant", True)]
    assert after[-1].content == failed.safe_reply

    # The retry with the same client message id finishes the turn: exactly one reply. It
    # comes from another orchestrator on the same store (a client retrying elsewhere), with
    # room for the test server to finish serving the stalled stream first.
    await orch.aclose()
    script_anthropic(wire, Reply(sse=anthropic_sse(TEXTS)))
    orch = Orchestrator(
        potato_categories(), model="anthropic:claude-test", store=db_url, turn_deadline=30.0
    )
    retried = [e async for e in orch.stream("c", "a bag of purple please", client_message_id="k")]
    transcript = await orch.transcript("c")
    await orch.aclose()
    done = retried[-1]
    assert isinstance(done, Done) and joined(retried) == done.reply.text == "".join(TEXTS)
    assert [(m.role, m.failed) for m in transcript] == [("user", False), ("assistant", False)]
