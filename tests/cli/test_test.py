"""`frontdesk test PATH...`: conversation tests from the command line, exit codes, JUnit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from xml.etree import ElementTree as ET

from typer.testing import CliRunner

from frontdesk.cli import app

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.orchestrator._bank:build"
runner = CliRunner()

CONVERSATION = """
conversations:
  - name: freeze a lost card
    user_id: alice
    turns:
      - user: "I lost my card ending 4242, freeze it"
        category: CARD_FREEZE
        request: {last_four: "4242"}
        handoff: false
        reply_contains: ["frozen"]
      - user: "Freeze 4242 again"
        category: CARD_FREEZE
        request: {last_four: "4242"}
        reply_contains: ["already frozen"]
"""


def _file(tmp_path: Path, text: str = CONVERSATION) -> Path:
    path = tmp_path / "conv.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_every_turn_matching_exits_0_and_writes_junit(tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    result = runner.invoke(app, ["test", str(_file(tmp_path)), "--app", APP, "--junit", str(junit)])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout and result.stdout.rstrip().endswith(f"JUnit report: {junit}")
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("1", "0", "0")


def test_a_turn_that_does_not_match_exits_1_naming_it(tmp_path: Path) -> None:
    path = _file(tmp_path, CONVERSATION.replace('["already frozen"]', '["thawed"]'))
    junit = tmp_path / "report.xml"
    result = runner.invoke(app, ["test", str(path), "--app", APP, "--junit", str(junit)])
    assert result.exit_code == 1, result.output
    assert "FAIL" in result.stdout
    assert "run 1, turn 2 ('Freeze 4242 again'): reply_contains: expected ['thawed']" in (
        result.stdout
    )
    (failure,) = ET.parse(junit).getroot().iter("failure")
    assert "turn 2" in failure.get("message", "")


def test_a_file_not_in_the_format_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _file(tmp_path, "conversations:\n  - name: x\n    turns: [{usr: hi}]\n")
    result = runner.invoke(app, ["test", str(path), "--app", APP])
    assert result.exit_code == 2
    assert "error:" in result.output and "turns.0.user" in result.output


def test_an_app_that_cannot_be_scripted_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["test", str(_file(tmp_path)), "--app", "tests.orchestrator._bank:build_ignoring_model"],
    )
    assert result.exit_code == 2
    assert "model" in result.output


def test_with_a_model_every_conversation_runs_repeat_times(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["test", str(_file(tmp_path)), "--app", APP, "--model", "offline", "--repeat", "2"],
    )
    assert "a model, 2 run(s) each" in result.stdout
    assert "pass^1" in result.stdout and "pass^2" in result.stdout
    assert result.exit_code == (0 if "all passed" in result.stdout else 1)


def test_a_broken_handler_fails_its_turn_and_logs_the_traceback(tmp_path: Path) -> None:
    """The real command in a process of its own: stderr gets `handler.failed` with the
    traceback, stdout names the failing turn, exit status 1."""
    path = _file(
        tmp_path,
        """
        conversations:
          - name: broken
            user_id: alice
            turns:
              - user: "break it"
                category: BROKEN
                request: {what: "x"}
        """,
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("frontdesk")), "test", str(path), "--app", APP],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "turn 1 ('break it'): HandlerFailed (KeyError: 'missing')" in done.stdout
    assert "handler.failed" in done.stderr and "category=BROKEN" in done.stderr
    assert "Traceback (most recent call last)" in done.stderr
    assert 'settings["missing"]' in done.stderr  # The frame; the message only in the audit.


SIMULATED = """
conversations:
  - name: a customer freezes a lost card
    user_id: alice
    simulate: {persona: "A worried customer", goal: "Freeze the lost card", max_turns: 4}
    expect: {category: CARD_FREEZE, request: {last_four: "4242"}, handler_calls: 1}
    judge: ['The assistant says "frozen"']
"""


def test_a_simulated_customer_with_a_python_model_user_and_judge(tmp_path: Path) -> None:
    path = _file(tmp_path, SIMULATED)
    result = runner.invoke(
        app,
        ["test", str(path), "--app", APP, "--model", "tests.orchestrator._players:offline",
         "--user", "tests.orchestrator._players:user", "--judge",
         "tests.orchestrator._players:judge", "--repeat", "2"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "pass^1 1.00, pass^2 1.00" in result.stdout
    assert "judge PASS 'The assistant says \"frozen\"'" in result.stdout


def test_a_model_attribute_that_is_not_a_model_is_named(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        [
            "test",
            str(_file(tmp_path)),
            "--app",
            APP,
            "--model",
            "tests.orchestrator._players:LINES",
        ],
    )
    assert result.exit_code != 0
    assert "_players.LINES is not a Model" in result.output
