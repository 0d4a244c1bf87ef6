"""Simulated customers in conversation tests: `simulate:`, `expect:`, `judge:`, pass^k."""

from __future__ import annotations

import textwrap
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from frontdesk.devkit.conversation_tests import load_file, run_files, write_junit
from frontdesk.errors import ConfigError, InvalidConversationFile
from frontdesk.experts.providers import Model
from tests.orchestrator import _bank, _players

pytestmark = pytest.mark.anyio

SIMULATED = """
conversations:
  - name: a customer freezes a lost card
    user_id: alice
    simulate: {persona: "A worried customer", goal: "Freeze the lost card", max_turns: 4}
    expect: {category: CARD_FREEZE, request: {last_four: 4242}, handler_calls: 1, handoff: false}
    judge: ['The assistant says "frozen"', 'The assistant says "sorry"']
"""


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sim.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


async def test_a_simulated_customer_runs_k_times_with_verdicts_and_pass_hat_k(
    tmp_path: Path,
) -> None:
    spec = load_file(_file(tmp_path, SIMULATED))
    report = await run_files(
        [spec], _bank.build, workdir=tmp_path, model="offline", repeat=3,
        user=_players.user, judge=_players.judge,
    )  # fmt: skip
    (conv,) = report.conversations
    run = conv.runs[0]
    assert [t.user for t in run.turns] == _players.LINES
    assert all(c.passed for c in run.checks), [c.describe() for c in run.checks]
    assert [(v.passed, v.reason) for v in run.verdicts] == [
        (True, "the transcript says 'frozen'"),
        (False, "the transcript never says 'sorry'"),
    ]
    assert (len(conv.runs), conv.pass_hat(1), conv.pass_hat(3)) == (3, 0.0, 0.0)
    text = report.text()
    assert "pass^1 0.00, pass^3 0.00" in text
    assert "judge: 'The assistant says \"sorry\"' failed: the transcript never says 'sorry'" in text
    assert "judge PASS 'The assistant says \"frozen\"'" in text
    junit = tmp_path / "r.xml"
    write_junit(report, junit)
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures")) == ("3", "3")
    assert "judge PASS" in (next(root.iter("system-out")).text or "")


async def test_passing_criteria_and_expectations_give_pass_hat_k_of_one(tmp_path: Path) -> None:
    text = SIMULATED.replace(", 'The assistant says \"sorry\"'", "")
    report = await run_files(
        [load_file(_file(tmp_path, text))], _bank.build, workdir=tmp_path, model="offline",
        repeat=2, user=_players.user, judge=_players.judge,
    )  # fmt: skip
    (conv,) = report.conversations
    assert conv.passed and conv.pass_hat(2) == 1.0


async def test_a_wrong_expectation_names_the_field(tmp_path: Path) -> None:
    text = SIMULATED.replace("handler_calls: 1", "handler_calls: 2").replace("4242}", "4243}")
    report = await run_files(
        [load_file(_file(tmp_path, text))], _bank.build, workdir=tmp_path, model="offline",
        user=_players.user, judge=_players.judge,
    )  # fmt: skip
    problems = report.conversations[0].runs[0].problems()
    assert "expect request: last_four: expected '4243', got '4242'" in problems
    assert "expect handler_calls: expected 2, got 1" in problems


async def test_without_a_user_model_the_error_says_where_to_give_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match='"user" entry'):
        await run_files(
            [load_file(_file(tmp_path, SIMULATED))], _bank.build, workdir=tmp_path,
            model="offline",
        )  # fmt: skip


async def test_the_model_maps_user_and_judge_play_when_none_is_passed(tmp_path: Path) -> None:
    models: dict[str, str | Model] = {
        "default": "offline",
        "user": _players.user,
        "judge": _players.judge,
    }
    report = await run_files(
        [load_file(_file(tmp_path, SIMULATED))], _bank.build, workdir=tmp_path, model=models
    )
    assert len(report.conversations[0].runs[0].verdicts) == 2


def test_turns_and_simulate_are_exclusive(tmp_path: Path) -> None:
    text = SIMULATED.replace("    judge:", "    turns: [{user: hi}]\n    judge:")
    with pytest.raises(InvalidConversationFile, match="either `turns`"):
        load_file(_file(tmp_path, text))
