"""Conversation tests (`frontdesk test`'s engine): scripted handler tests and model evaluations."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest

from frontdesk.devkit.conversation_tests import (
    ConversationResult,
    Report,
    RunResult,
    TurnResult,
    load_file,
    run_files,
    write_junit,
)
from frontdesk.errors import ConfigError, InvalidConversationFile
from frontdesk.testing import FunctionModel, ModelRequest
from tests.orchestrator import _bank

pytestmark = pytest.mark.anyio

PASSING = """
conversations:
  - name: freeze a lost card
    user_id: alice
    turns:
      - user: "I lost my card ending 4242, freeze it"
        category: CARD_FREEZE
        request: {last_four: "4242"}
        handoff: false
        data: {frozen: "4242", already: false}
        reply_contains: ["frozen"]
      - user: "Did that work? Freeze 4242 again to be sure"
        category: CARD_FREEZE
        request: {last_four: "4242"}
        reply_contains: ["already frozen"]
  - name: balance, then a complaint
    user_id: bob
    turns:
      - user: "What's my balance?"
        category: BALANCE
        need_more_info: [account]
        reply_contains: ["account"]
      - user: "The current account"
        category: BALANCE
        request: {account: current}
        data: {amount: "1234.50"}
      - user: "The branch was rude to me"
        category: COMPLAINT
        request: {summary: "The branch was rude to me"}
        handoff: true
  - name: small talk
    turns:
      - user: "hello"
        category: OTHER
        reply_contains: ["things we can help with: freeze a lost or stolen card"]
"""


def _file(tmp_path: Path, text: str, name: str = "conv.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


async def test_a_scripted_file_tests_handlers_state_handoffs_and_replies(tmp_path: Path) -> None:
    spec = load_file(_file(tmp_path, PASSING))
    report = await run_files([spec], _bank.build, workdir=tmp_path)
    assert report.passed, report.text()
    assert report.scripted
    assert [len(c.runs) for c in report.conversations] == [1, 1, 1]
    freeze = report.conversations[0].runs[0].turns
    # The response expert says the handler's instruction, as the offline stand-in does.
    assert freeze[0].reply == "[offline] Card ending 4242 is frozen."
    assert freeze[1].reply == "[offline] Card ending 4242 is already frozen."
    accuracy = report.field_accuracy()
    assert accuracy["category"] == (6, 6) and accuracy["handoff"] == (2, 2)
    assert report.text().splitlines()[-1] == "all passed"


async def test_a_wrong_expectation_fails_naming_the_turn_and_the_junit_file_says_so(
    tmp_path: Path,
) -> None:
    text = PASSING.replace('reply_contains: ["already frozen"]', 'reply_contains: ["thawed"]')
    report = await run_files([load_file(_file(tmp_path, text))], _bank.build, workdir=tmp_path)
    assert not report.passed
    (failed,) = [c for c in report.conversations if not c.passed]
    assert failed.name == "freeze a lost card"
    assert "run 1, turn 2 ('Did that work? Freeze 4242 again to be sure'): reply_contains:" in (
        report.text()
    )
    junit = tmp_path / "report.xml"
    write_junit(report, junit)
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "0")
    (failure,) = root.iter("failure")
    assert failure.get("message", "").startswith("turn 2 (")
    names = [case.get("name") for case in root.iter("testcase")]
    assert names == ["freeze a lost card", "balance, then a complaint", "small talk"]


async def test_a_script_the_request_model_refuses_is_reported_not_hidden(tmp_path: Path) -> None:
    text = """
    conversations:
      - name: bad digits
        user_id: alice
        turns:
          - user: "freeze my card"
            category: CARD_FREEZE
            request: {last_four: "42"}
    """
    report = await run_files([load_file(_file(tmp_path, text))], _bank.build, workdir=tmp_path)
    turn = report.conversations[0].runs[0].turns[0]
    assert not turn.passed
    assert "request: last_four: the expected '42' is not valid (String should" in turn.describe()


async def test_a_broken_handler_fails_its_turn_with_the_exception(tmp_path: Path) -> None:
    text = """
    conversations:
      - name: broken
        user_id: alice
        turns:
          - user: "break it"
            category: BROKEN
            request: {what: "x"}
          - user: "never sent"
    """
    report = await run_files([load_file(_file(tmp_path, text))], _bank.build, workdir=tmp_path)
    turns = report.conversations[0].runs[0].turns
    assert len(turns) == 1  # The conversation stops at the failed turn.
    assert turns[0].error == "HandlerFailed (KeyError: 'missing')"
    junit = tmp_path / "j.xml"
    write_junit(report, junit)
    (error,) = ET.parse(junit).getroot().iter("error")
    assert "KeyError" in error.get("message", "")


async def test_with_a_model_runs_repeat_and_reports_pass_hat_k(tmp_path: Path) -> None:
    flips = itertools.cycle(["CARD_FREEZE", "CARD_FREEZE", "OTHER"])

    def flaky(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": next(flips), "reason": "flaky"}
        if request.expert == "request":
            return {"request": {"last_four": "4242"}}
        if request.expert == "memory":
            return {"facts": []}
        return "Your card ending 4242 is frozen."

    text = """
    conversations:
      - name: freeze
        user_id: alice
        turns:
          - user: "I lost my card ending 4242"
            category: CARD_FREEZE
            request: {last_four: "4242"}
            reply_contains: ["frozen"]
    """
    report = await run_files(
        [load_file(_file(tmp_path, text))],
        _bank.build,
        workdir=tmp_path,
        model=FunctionModel(flaky),
        repeat=3,
    )
    (conv,) = report.conversations
    assert [r.passed for r in conv.runs] == [True, True, False]
    assert conv.pass_hat(1) == pytest.approx(2 / 3) and conv.pass_hat(3) == 0.0
    assert report.field_accuracy()["category"] == (2, 3)
    assert "pass^1 0.67, pass^3 0.00" in report.text()


def test_pass_hat_k_is_the_chance_k_runs_all_pass() -> None:
    runs = [RunResult(run=i, turns=[TurnResult(index=1, user="x")], seconds=0) for i in range(4)]
    runs[0].turns[0].error = "boom"
    conv = ConversationResult(file="f", name="n", runs=runs)
    assert [conv.pass_hat(k) for k in (1, 2, 4)] == pytest.approx([3 / 4, 3 / 6, 0.0])
    assert not Report(conversations=[conv], scripted=False, repeat=4).passed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("conversations: [", "not valid YAML"),
        ("- a list", "expected a mapping"),
        ("conversations:\n  - name: x\n    turns:\n      - {}\n", "conversations.0.turns.0.user"),
        ("conversations:\n  - name: x\n    turns: [{user: hi, categroy: X}]\n", "categroy"),
    ],
)
def test_a_file_not_in_the_format_names_the_file_and_the_place(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(InvalidConversationFile, match=message) as caught:
        load_file(path)
    assert str(path) in str(caught.value)


async def test_a_category_the_app_does_not_have_is_refused(tmp_path: Path) -> None:
    text = "conversations:\n  - name: x\n    turns: [{user: hi, category: LOANS}]\n"
    with pytest.raises(InvalidConversationFile, match="LOANS.*BALANCE"):
        await run_files([load_file(_file(tmp_path, text))], _bank.build, workdir=tmp_path)


async def test_an_app_that_drops_the_model_cannot_be_scripted(tmp_path: Path) -> None:
    text = "conversations:\n  - name: x\n    turns: [{user: hi}]\n"
    with pytest.raises(ConfigError, match="model"):
        await run_files(
            [load_file(_file(tmp_path, text))], _bank.build_ignoring_model, workdir=tmp_path
        )
