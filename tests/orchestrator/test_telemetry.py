"""Traces of a turn through the real Anthropic SDK (a local wire server): the turn span, one
`chat {model}` span per expert call with the GenAI attributes, and no message text."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from frontdesk import telemetry
from frontdesk.errors import TurnFailed
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.orchestrator import Orchestrator
from tests._otel import recorded_spans
from tests.experts.providers.wire_server import (
    ANTHROPIC_PATH,
    Reply,
    WireServer,
    anthropic_text,
    anthropic_tool,
)

pytestmark = pytest.mark.anyio

QUESTION = "I'd like to buy a bag of purple potatoes, card 4111 1111 1111 1111"
ANSWER = "Please press confirm to buy one bag of purple potatoes."
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    with recorded_spans() as exporter:
        yield exporter


@pytest.fixture
def anthropic(wire: WireServer, monkeypatch: pytest.MonkeyPatch) -> WireServer:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    return wire


def _script_turn(wire: WireServer, *, triage_overloaded_first: bool = False) -> None:
    usage = {"input_tokens": 120, "output_tokens": 9, "cache_read_input_tokens": 800}
    first = [Reply(status=529, body=OVERLOADED)] if triage_overloaded_first else []
    wire.script(
        ANTHROPIC_PATH,
        *first,
        Reply(
            body=anthropic_tool(
                "TriageDecision", {"category": "ORDERS", "reason": "buy"}, usage=usage
            )
        ),
        Reply(
            body=anthropic_tool(
                "OrderRequestExtraction", {"request": {"variety": "purple", "bags": 1}}
            )
        ),
        Reply(body=anthropic_text(ANSWER)),
    )


def _every_value(span: ReadableSpan) -> list[str]:
    values = [str(v) for v in (span.attributes or {}).values()]
    for event in span.events:
        values += [event.name, *(str(v) for v in (event.attributes or {}).values())]
    return [span.name, *values]


async def test_one_turn_is_a_turn_span_over_three_chat_spans(
    anthropic: WireServer, spans: InMemorySpanExporter, db_url: str
) -> None:
    _script_turn(anthropic)
    orch = Orchestrator(potato_categories(), model="anthropic:claude-test", store=db_url)
    try:
        reply = await orch.handle("conv-otel", QUESTION)
    finally:
        await orch.aclose()
    assert reply.text == ANSWER

    finished = spans.get_finished_spans()
    (turn,) = [s for s in finished if s.name == "frontdesk.turn"]
    chats = [s for s in finished if s.name.startswith("chat ")]
    assert [s.attributes["frontdesk.expert"] for s in chats if s.attributes] == [
        "triage",
        "request",
        "response",
    ]
    assert turn.attributes is not None and turn.context is not None
    assert turn.attributes["gen_ai.conversation.id"] == "conv-otel"
    assert turn.attributes["frontdesk.category"] == "ORDERS"
    assert turn.attributes["frontdesk.turn_id"] == reply.user_message_id
    assert turn.attributes["frontdesk.turn.outcome"] == "answered"
    assert turn.attributes["frontdesk.turn.replayed"] is False
    assert turn.attributes["frontdesk.turn.held"] is False
    assert isinstance(turn.attributes["frontdesk.audit.event_id"], str)
    for chat in chats:
        assert chat.name == "chat claude-test"
        assert chat.kind is SpanKind.CLIENT
        assert chat.parent is not None and chat.parent.span_id == turn.context.span_id
        assert chat.context is not None and chat.context.trace_id == turn.context.trace_id
        attributes = chat.attributes or {}
        assert attributes["gen_ai.operation.name"] == "chat"
        assert attributes["gen_ai.provider.name"] == "anthropic"
        assert attributes["gen_ai.request.model"] == "claude-test"
        assert attributes["gen_ai.response.model"] == "claude-test"
        assert isinstance(attributes["gen_ai.usage.input_tokens"], int)
        assert isinstance(attributes["gen_ai.usage.output_tokens"], int)
        assert "gen_ai.usage.cache_read.input_tokens" in attributes
        assert "gen_ai.usage.cache_creation.input_tokens" in attributes
        assert chat.status.status_code is StatusCode.UNSET
        (attempt,) = chat.events
        assert attempt.name == "frontdesk.attempt" and attempt.attributes is not None
        assert (
            attempt.attributes["frontdesk.audit.event_id"] == attributes["frontdesk.audit.event_id"]
        )
    triage = chats[0].attributes or {}
    assert triage["gen_ai.usage.input_tokens"] == 920  # 120 uncached + 800 read from cache
    assert triage["gen_ai.usage.cache_read.input_tokens"] == 800
    assert triage["gen_ai.usage.output_tokens"] == 9
    assert triage["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert (chats[2].attributes or {})["gen_ai.response.finish_reasons"] == ("end_turn",)

    # The audit rows the spans point at exist, and hold what the spans do not.
    stored = {e.event_id: e for e in await _events(db_url, "conv-otel")}
    assert stored[str(turn.attributes["frontdesk.audit.event_id"])].kind == "turn_started"
    for chat in chats:
        row = stored[str((chat.attributes or {})["frontdesk.audit.event_id"])]
        assert row.kind == "model_attempt"

    # No message text, instruction, reply or system prompt anywhere on any span.
    # The card as written or run together: "4111" alone is in about one random 32-digit
    # hex id of 2,000, and the spans hold about ten ids, so about one run in 200 (an audit
    # event id failed a clean-clone CI run once).
    card = ["4111 1111", "41111111"]
    said = [QUESTION, *card, "purple potatoes", ANSWER, "confirm", "Ask the user", "You are"]
    for span in finished:
        for value in _every_value(span):
            assert not any(text in value for text in said), (span.name, value)


async def _events(db_url: str, conversation_id: str) -> list[Any]:
    from frontdesk.audit.store import AuditLog

    log = await AuditLog.open(db_url)
    try:
        return list(await log.events(conversation_id))
    finally:
        await log.aclose()


async def test_a_retried_attempt_is_an_event_and_a_failed_call_an_error(
    anthropic: WireServer, spans: InMemorySpanExporter, db_url: str
) -> None:
    _script_turn(anthropic, triage_overloaded_first=True)
    anthropic.script(ANTHROPIC_PATH, *[Reply(status=529, body=OVERLOADED)] * 4)
    orch = Orchestrator(potato_categories(), model="anthropic:claude-test", store=db_url)
    try:
        await orch.handle("conv-retry", "a bag of purple potatoes")
        with pytest.raises(TurnFailed):
            await orch.handle("conv-down", "hello there")
    finally:
        await orch.aclose()

    finished = spans.get_finished_spans()
    triage = [s for s in finished if (s.attributes or {}).get("frontdesk.expert") == "triage"]
    retried, failed = triage
    assert [e.attributes["frontdesk.attempt"] for e in retried.events if e.attributes] == [1, 2]
    first = retried.events[0].attributes or {}
    assert first["http.response.status_code"] == 529 and first["frontdesk.will_retry"] is True
    assert first["error.type"] == "ProviderOverloaded"
    assert retried.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "ProviderOverloaded"
    assert len(failed.events) == 4
    down = [s for s in finished if s.name == "frontdesk.turn"][-1]
    assert (down.attributes or {})["frontdesk.turn.outcome"] == "failed"
    assert down.status.status_code is StatusCode.ERROR


async def test_content_capture_is_an_opt_in_and_goes_through_redaction(
    anthropic: WireServer, spans: InMemorySpanExporter, db_url: str
) -> None:
    _script_turn(anthropic)
    telemetry.configure(capture_content=True)
    orch = Orchestrator(potato_categories(), model="anthropic:claude-test", store=db_url)
    try:
        await orch.handle("conv-capture", QUESTION)
    finally:
        await orch.aclose()
        telemetry.configure()
    chats = [s for s in spans.get_finished_spans() if s.name.startswith("chat ")]
    sent = str((chats[0].attributes or {})["gen_ai.input.messages"])
    assert "purple potatoes" in sent  # the content, as asked
    assert "4111" not in sent and "[CARD]" in sent  # the card redacted
    assert ANSWER in str((chats[2].attributes or {})["gen_ai.output.messages"])
