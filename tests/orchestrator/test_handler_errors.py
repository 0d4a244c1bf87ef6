"""A handler's failure is seen (log line, audited traceback), then contained or raised."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
import structlog
from pydantic import BaseModel
from structlog.testing import capture_logs

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.audit.redaction import redact_rows
from frontdesk.audit.transcript import build_transcript
from frontdesk.errors import ConfigError, HandlerFailed
from frontdesk.logs import protect_logs
from frontdesk.testing import FunctionModel, ModelRequest

pytestmark = pytest.mark.anyio

CARD = "4111 1111 1111 1111"


class Ask(BaseModel):
    what: str


def _app(handler: Any, url: str, **kwargs: Any) -> tuple[Orchestrator, list[str]]:
    calls: list[str] = []

    async def counted(request: Ask, context: HandlerContext) -> Outcome:
        calls.append(request.what)
        result: Outcome = await handler(request, context)
        return result

    def model(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "ASK", "reason": "test"}
        if request.expert == "request":
            return {"request": {"what": "it"}}
        if request.expert == "memory":
            return {"facts": []}
        return "Sorry, something went wrong."

    category = Category(name="ASK", description="Asking", request=Ask, handler=counted)
    return Orchestrator([category], model=FunctionModel(model), store=url, **kwargs), calls


async def _key_error(request: Ask, context: HandlerContext) -> Outcome:
    settings: dict[str, str] = {}
    return Outcome(instruction=settings["missing"])


@pytest.fixture
def unconfigured_logs() -> None:
    """structlog as an application that never configured it has it (other tests configure
    it), with frontdesk's redaction installed as importing frontdesk installs it."""
    structlog.reset_defaults()
    protect_logs()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, db_url: str) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_pg_url"))
    return db_url


async def test_raise_makes_handle_raise_handler_failed_and_keeps_the_message(url: str) -> None:
    orch, calls = _app(_key_error, url, handler_errors="raise")
    with pytest.raises(HandlerFailed) as caught:
        await orch.handle("c-1", "do it", user_id="alice", client_message_id="m-1")
    error = caught.value
    assert isinstance(error.__cause__, KeyError) and error.category == "ASK"
    assert error.stage == "handler" and "KeyError" in str(error)
    transcript = await orch.transcript("c-1", user_id="alice")
    assert [m.role for m in transcript] == ["user", "assistant"]
    assert transcript[0].content == "do it"
    assert transcript[1].kind == "failed"  # The safe-reply marker: no reply stored.
    assert await orch.store.turn_record(error.user_message_id) is not None
    assert (await orch.store.turn_record(error.user_message_id)).outcome is None
    assert orch.audit_log is not None
    view = build_transcript("c-1", await orch.audit_log.events("c-1"))
    (turn,) = view.turns
    assert turn.handler_error == "KeyError: 'missing'"
    assert turn.handler_traceback is not None and 'settings["missing"]' in turn.handler_traceback
    assert turn.failure is not None and turn.failure["stage"] == "handler"
    with pytest.raises(HandlerFailed):  # A retry runs the handler again: nothing was kept.
        await orch.handle("c-1", "do it", user_id="alice", client_message_id="m-1")
    assert calls == ["it", "it"]
    await orch.aclose()


@pytest.mark.usefixtures("unconfigured_logs")
async def test_reply_answers_the_apology_and_stderr_holds_the_traceback(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    orch, calls = _app(_key_error, db_url)
    reply = await orch.handle("c-1", "do it", user_id="alice")
    await orch.aclose()
    assert reply.outcome is not None and reply.handler_failed and reply.outcome.data == {}
    err = capsys.readouterr().err
    assert (
        "handler.failed" in err and "category=ASK" in err and f"turn={reply.user_message_id}" in err
    )
    assert "Traceback (most recent call last)" in err and 'settings["missing"]' in err
    assert "KeyError: (message kept out of logs" in err
    assert calls == ["it"]


async def test_every_failure_is_one_error_line_with_the_traceback(db_url: str) -> None:
    async def wrong_type(request: Ask, context: HandlerContext) -> Any:
        return "not an outcome"

    orch, _ = _app(wrong_type, db_url)
    with capture_logs() as logs:
        reply = await orch.handle("c-1", "do it")
    await orch.aclose()
    (line,) = [e for e in logs if e["event"] == "handler.failed"]
    assert line["log_level"] == "error" and line["category"] == "ASK"
    assert line["turn"] == reply.user_message_id
    assert line["error"] == "TypeError"
    assert "in checked" in line["exception"] and "returned str" not in line["exception"]


async def test_data_pydantic_writes_as_json_is_stored_and_replayed_in_json_form(
    db_url: str,
) -> None:
    async def priced(request: Ask, context: HandlerContext) -> Outcome:
        return Outcome(instruction="Tell the price.", data={"amount": Decimal("42.99")})

    orch, calls = _app(priced, db_url, handler_errors="raise")
    first = await orch.handle("c-1", "price?", client_message_id="m-1")
    again = await orch.handle("c-1", "price?", client_message_id="m-1")
    await orch.aclose()
    assert first.outcome is not None and again.outcome is not None
    assert first.outcome.data == again.outcome.data == {"amount": "42.99"}
    assert again.replayed and calls == ["it"]


async def test_data_changed_after_construction_is_a_handler_error_not_a_db_error(
    db_url: str,
) -> None:
    """Checked again when the handler returns: never a failure at the database write, and
    never a handler run a second time."""

    async def sneaky(request: Ask, context: HandlerContext) -> Outcome:
        outcome = Outcome(instruction="x", data={})
        outcome.data["tags"] = {"a", "b"}
        return outcome

    orch, calls = _app(sneaky, db_url, handler_errors="raise")
    with pytest.raises(HandlerFailed) as caught:
        await orch.handle("c-1", "go", client_message_id="m-1")
    assert "data['tags'] is a set" in str(caught.value.__cause__)
    await orch.aclose()
    assert calls == ["it"]


@pytest.mark.usefixtures("unconfigured_logs")
async def test_the_message_stays_out_of_the_log_and_is_redacted_in_the_views(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def leaky(request: Ask, context: HandlerContext) -> Outcome:
        raise ValueError(f"bank refused card {CARD}")

    orch, _ = _app(leaky, db_url)
    await orch.handle("c-1", "go", user_id="alice")
    assert orch.audit_log is not None
    rows = await orch.audit_log.events("c-1")
    await orch.aclose()
    (stored,) = [r for r in rows if r.kind == "handler_error"]
    assert CARD in stored.payload["traceback"]  # The record is exact (encrypted with a key).
    (shown,) = [r for r in redact_rows(rows) if r.kind == "handler_error"]
    assert CARD not in shown.payload["traceback"] and CARD not in shown.payload["error"]
    assert "ValueError" in shown.payload["traceback"]
    err = capsys.readouterr().err
    assert "handler.failed" in err and "raise ValueError" in err  # Where, not what.
    assert CARD not in err and "ValueError: (message kept out of logs" in err


def test_handler_errors_takes_reply_or_raise() -> None:
    with pytest.raises(ConfigError, match="handler_errors"):
        Orchestrator([], handler_errors="ignore")
