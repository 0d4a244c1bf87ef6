"""Audit fixtures: an `AuditLog` on SQLite and on PostgreSQL (a fresh database per test)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from frontdesk.audit.events import AuditEvent
from frontdesk.audit.store import AuditLog

SYSTEM_TRIAGE = "You are the triage expert. Pick one category."


def turn_events(
    turn_id: str,
    *,
    user_text: str = "I'd like a bag of purple potatoes",
    reply: str = "Ok great, please press confirm.",
    attempts: int = 1,
    start: datetime | None = None,
) -> list[AuditEvent]:
    """The events one turn writes, as the orchestrator builds them."""
    t0 = start or datetime(2026, 1, 1, tzinfo=UTC)
    n = 0

    def ev(kind: Any, payload: dict[str, Any], system: str | None = None) -> AuditEvent:
        nonlocal n
        n += 1
        return AuditEvent(
            kind=kind,
            turn_id=turn_id,
            payload=payload,
            system_prompt=system,
            created_at=t0 + timedelta(milliseconds=n),
        )

    events = [
        ev(
            "turn_started",
            {
                "user_message_id": turn_id,
                "text": user_text,
                "client_message_id": f"c-{turn_id}",
                "user_id": "u-1",
            },
        )
    ]
    for attempt in range(1, attempts + 1):
        failed = attempt < attempts
        events.append(
            ev(
                "model_attempt",
                {
                    "expert": "triage",
                    "model": "anthropic:claude-sonnet-4-5",
                    "attempt": attempt,
                    "latency_ms": 120.5,
                    "messages": [{"role": "user", "content": user_text}],
                    "settings": {"max_tokens": 1024, "temperature": None, "timeout": 60.0},
                    "prompt": {"name": "triage", "version": "1", "sha256": "x"},
                    "request_body": {"model": "claude-sonnet-4-5"},
                    "response_body": {"error": "overloaded"} if failed else {"content": "ORDERS"},
                    "usage": {
                        "input_tokens": 0 if failed else 1000,
                        "output_tokens": 0 if failed else 20,
                        "cache_read_tokens": 0 if failed else 500,
                        "cache_write_tokens": 0,
                    },
                    "status_code": 529 if failed else 200,
                    "provider_request_id": f"req-{attempt}",
                    "stop_reason": None if failed else "tool_use",
                    "error": "ProviderOverloaded: 529" if failed else None,
                    "output": None if failed else {"category": "ORDERS", "reason": "buying"},
                    "output_type": "Triage",
                },
                SYSTEM_TRIAGE,
            )
        )
    events += [
        ev("triage", {"category": "ORDERS", "reason": "buying"}),
        ev(
            "model_attempt",
            {
                "expert": "request",
                "model": "openai:gpt-4.1-mini",
                "attempt": 1,
                "latency_ms": 80.0,
                "messages": [{"role": "user", "content": user_text}],
                "usage": {
                    "input_tokens": 2000,
                    "output_tokens": 30,
                    "cache_read_tokens": 0,
                    "cache_write_tokens": 0,
                },
                "status_code": 200,
                "output": {"request": {"variety": "purple", "bags": 1}, "need_more_info": None},
                "response_body": {"id": "x"},
                "output_type": "OrderRequestExtraction",
            },
            "You are the request expert.",
        ),
        ev("request", {"category": "ORDERS", "request": {"variety": "purple", "bags": 1}}),
        ev(
            "outcome",
            {"category": "ORDERS", "instruction": "Ask the user to confirm one bag", "data": {}},
        ),
        ev(
            "model_attempt",
            {
                "expert": "response",
                "model": "anthropic:claude-sonnet-4-5",
                "attempt": 1,
                "latency_ms": 300.0,
                "messages": [
                    {"role": "user", "content": user_text},
                    {"role": "assistant", "content": "Ask the user to confirm one bag"},
                ],
                "usage": {
                    "input_tokens": 1500,
                    "output_tokens": 40,
                    "cache_read_tokens": 1000,
                    "cache_write_tokens": 200,
                },
                "status_code": 200,
                "output": reply,
                "response_body": {"text": reply},
                "output_type": None,
            },
            "You are the response expert.",
        ),
        ev("reply", {"assistant_message_id": f"a-{turn_id}", "text": reply}),
    ]
    return events


@pytest.fixture
def make_turn() -> Callable[..., list[AuditEvent]]:
    """`make_turn(turn_id, ...)` -> the events of one recorded turn."""
    return turn_events


@pytest.fixture
def conv_id() -> str:
    """A conversation id no other test uses."""
    return f"conv-{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def audit_log(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AuditLog]:
    """An open `AuditLog` on each backend."""
    if request.param == "sqlite":
        log = await AuditLog.open(f"sqlite:///{tmp_path / 'audit.db'}")
        try:
            yield log
        finally:
            await log.aclose()
        return
    log = await AuditLog.open(str(request.getfixturevalue("fresh_pg_url")))
    try:
        yield log
    finally:
        await log.aclose()
