"""Secrets stay out of what is printed, logged, stored and chained."""

from __future__ import annotations

import asyncio
import io
import json
import traceback
from pathlib import Path
from typing import Any

import pytest
import structlog
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk.audit.export import write_jsonl
from frontdesk.db import create_engine, dispose_engine, normalise_url
from frontdesk.errors import ConfigError, ModelConnectionError, ModelHTTPError
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import ModelRequest, model_from_spec
from frontdesk.experts.providers._retry import RetryConfig
from frontdesk.experts.providers.anthropic import AnthropicModel
from frontdesk.experts.providers.openai import OpenAIModel
from frontdesk.masking import mask_url, scrub
from frontdesk.orchestrator import Orchestrator
from frontdesk.threads.store import ConversationStore
from tests.experts.providers.wire_server import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    Reply,
    WireServer,
    anthropic_error,
    openai_completion,
    openai_error,
)

PASSWORD = "hunter2-Secret-Pass"
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdefSECRET"
OPENAI_KEY = "sk-proj-0123456789abcdefSECRETKEY"


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("http://user:pw@host:8000/v1", "http://user:***@host:8000/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("https://host/v1?api_key=abc&x=1", "https://host/v1?api_key=***&x=1"),
        ("postgresql+asyncpg://app:p%40ss@db/shop", "postgresql+asyncpg://app:***@db/shop"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_scrub_masks_url_passwords_keys_and_bearer_tokens() -> None:
    text = (
        f"openai:m@http://u:{PASSWORD}@h/v1 key {ANTHROPIC_KEY}"
        " Authorization: Bearer abcdefghijklmnop"
    )
    out = scrub(text)
    assert PASSWORD not in out and ANTHROPIC_KEY[7:] not in out and "abcdefghijklmnop" not in out
    assert out.startswith("openai:m@http://u:***@h/v1")


def _chain(error: BaseException) -> list[BaseException]:
    """The exception and everything chained to it, as `__cause__` or `__context__`."""
    seen: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _everything_about(error: BaseException) -> str:
    parts = [repr(e) for e in _chain(error)]
    parts += [repr(getattr(e, "body", None)) for e in _chain(error)]
    parts += [repr(vars(e)) for e in _chain(error) if hasattr(e, "__dict__")]
    parts.append("".join(traceback.format_exception(error)))
    return "\n".join(parts)


@pytest.mark.anyio
@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
async def test_a_key_echoed_in_a_401_is_nowhere_in_the_raised_chain(
    wire: WireServer, sdk: str
) -> None:
    model: AnthropicModel | OpenAIModel
    if sdk == "anthropic":
        key = ANTHROPIC_KEY
        echoed = f"invalid x-api-key {key}"
        wire.script(ANTHROPIC_PATH, Reply(401, anthropic_error("authentication_error", echoed)))
        model = AnthropicModel("claude-test", api_key=key, base_url=wire.url)
    else:
        key = OPENAI_KEY
        echoed = f"Incorrect API key provided: {key}"
        wire.script(OPENAI_PATH, Reply(401, openai_error("invalid_request_error", echoed)))
        model = OpenAIModel("gpt-test", api_key=key, base_url=wire.url + "/v1")
    request = ModelRequest(
        expert="triage", system="s", messages=[{"role": "user", "content": "hi"}]
    )
    try:
        with pytest.raises(ModelHTTPError) as info:
            await model.request(request)
    finally:
        await model.aclose()
    chain = _chain(info.value)
    # No SDK exception (holding the raw body and the request's auth header) is chained.
    assert not any(type(e).__module__.split(".")[0] in ("anthropic", "openai") for e in chain)
    assert len(chain) == 2 and "AuthenticationError" in str(chain[1])  # the scrubbed summary
    text = _everything_about(info.value)
    assert key not in text and key[-12:] not in text


@pytest.mark.anyio
async def test_a_connection_error_names_the_server_without_its_password(
    closed_port_url: str, allow_model_requests: None
) -> None:
    base = closed_port_url.replace("http://", f"http://app:{PASSWORD}@") + "/v1"
    model = OpenAIModel("m", base_url=base, retry=RetryConfig(max_attempts=1))
    request = ModelRequest(
        expert="triage", system="s", messages=[{"role": "user", "content": "hi"}]
    )
    try:
        with pytest.raises(ModelConnectionError) as info:
            await model.request(request)
    finally:
        await model.aclose()
    assert "app:***@" in str(info.value)
    assert PASSWORD not in _everything_about(info.value)


@pytest.mark.anyio
async def test_a_url_password_in_a_model_spec_is_masked_in_logs_audit_and_export(
    wire: WireServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    base = wire.url.replace("http://", f"http://app:{PASSWORD}@") + "/v1"
    spec = f"openai:gpt-test@{base}"
    model = model_from_spec(spec)
    assert model.name == f"openai:gpt-test@{mask_url(base)}" and PASSWORD not in model.name
    wire.script(
        OPENAI_PATH,
        Reply(body=openai_completion('{"category": "ORDERS", "reason": "buy"}')),
        Reply(body=openai_completion('{"request": {"variety": "purple", "bags": 1}}')),
        Reply(body=openai_completion("Please confirm one bag.")),
    )
    orch = Orchestrator(potato_categories(), model=model, store=f"sqlite:///{tmp_path / 'f.db'}")
    with structlog.testing.capture_logs() as logs:
        reply = await orch.handle("c", "I'd like a bag of purple potatoes")
    log = orch.audit_log
    assert log is not None
    rows = await log.events("c")
    transcript = await orch.transcript("c")
    await orch.aclose()
    await model.aclose()  # type: ignore[attr-defined]

    assert len(wire.requests_to(OPENAI_PATH)) == 3  # the server was reached through the URL
    attempts = [e for e in logs if e.get("event") == "model_attempt"]
    assert len(attempts) == 3 and all("app:***@" in e["model"] for e in attempts)
    out = io.StringIO()
    write_jsonl(rows, out)
    stored: list[Any] = [repr(logs), out.getvalue(), repr(reply)]
    stored += [json.dumps(r.payload) for r in rows] + [repr(m) for m in transcript]
    for text in stored:
        assert PASSWORD not in text


def test_the_store_url_and_url_errors_hide_the_database_password() -> None:
    engine: AsyncEngine = create_engine(f"postgresql://app:{PASSWORD}@127.0.0.1:1/shop")
    try:
        store = ConversationStore(engine)
        assert PASSWORD not in store.url and store.url == (
            "postgresql+asyncpg://app:***@127.0.0.1:1/shop"
        )
    finally:
        asyncio.run(dispose_engine(engine))
    with pytest.raises(ConfigError) as info:
        normalise_url(f"postgresql://app:{PASSWORD}@host:notaport/shop")
    assert PASSWORD not in str(info.value) and info.value.__cause__ is None
