"""Replay: recorded turns re-run with the recorded responses (no model call) or new models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from frontdesk.audit.replay import ReplayReport, ReplayResult, compare, replay_transcript
from frontdesk.audit.transcript import build_transcript
from frontdesk.devkit.replay import build_runner, parse_models
from frontdesk.errors import ConfigError
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

pytestmark = pytest.mark.anyio


class Team:
    """One function model for every expert: routes to ORDERS and extracts `bags`."""

    def __init__(self, bags: int = 1, route: str = "ORDERS") -> None:
        self.bags, self.route = bags, route
        self.calls: list[ModelRequest] = []

    def __call__(self, request: ModelRequest) -> Any:
        self.calls.append(request)
        if request.expert == "triage":
            return {"category": self.route, "reason": "buying"}
        if request.expert == "request":
            return {"request": {"variety": "purple", "bags": self.bags}, "need_more_info": None}
        return f"ok, {self.bags} bag(s) of purple potatoes: please confirm"


async def _recorded(tmp_path: Path) -> tuple[Orchestrator, Team, str]:
    team = Team()
    orch = Orchestrator(
        categories(), model=FunctionModel(team), store=f"sqlite:///{tmp_path / 'fd.db'}"
    )
    await orch.handle("c1", "I'd like a bag of purple potatoes")
    await orch.handle("c1", "that's right")
    return orch, team, "c1"


async def _report(orch: Orchestrator, conv: str, runner: Any) -> ReplayReport:
    assert orch.audit_log is not None
    transcript = build_transcript(conv, await orch.audit_log.events(conv))
    return ReplayReport(await replay_transcript(transcript, runner))


async def test_recorded_replay_reproduces_every_turn_without_model_calls(tmp_path: Path) -> None:
    orch, team, conv = await _recorded(tmp_path)
    try:
        calls_before = len(team.calls)
        report = await _report(orch, conv, build_runner(orch, models="recorded"))
        assert len(team.calls) == calls_before  # 0 model calls during replay
        assert len(report.diffs) == 2
        for diff in report.diffs:
            assert diff.error is None, diff.error
            assert not diff.gating and not diff.reply_changed
            assert diff.after is not None and diff.after.category == "ORDERS"
            assert diff.after.request == {"variety": "purple", "bags": 1, "confirmed": False}
        assert report.exit_code == 0
    finally:
        await orch.aclose()


async def test_a_changed_model_is_reported_and_gates(tmp_path: Path) -> None:
    orch, _team, conv = await _recorded(tmp_path)
    try:
        other = Team(bags=3)
        report = await _report(
            orch, conv, build_runner(orch, models={"default": FunctionModel(other)})
        )
        assert report.exit_code == 1
        diff = report.diffs[0]
        assert [(c.name, c.before, c.after) for c in diff.request_changes] == [("bags", 1, 3)]
        assert not diff.category_changed
        assert diff.after is not None and diff.after.reply is None
        assert "handlers are not called" in (diff.after.note or "")
        assert {c.expert for c in other.calls} == {"triage", "request"}
        rerouted = await _report(
            orch, conv, build_runner(orch, models={"triage": FunctionModel(Team(route="HUMAN"))})
        )
        assert rerouted.diffs[0].category_changed and rerouted.exit_code == 1
        assert rerouted.diffs[0].after is not None
        assert rerouted.diffs[0].after.reply is not None  # built-in route: reply re-run
        # Replies are unchanged: the original response model answers the hand-off the same way.
        assert rerouted.summary()[0] == (conv, 2, 2, 2, 0, 0, 0)
    finally:
        await orch.aclose()


async def test_same_decisions_with_a_new_reply_do_not_gate(tmp_path: Path) -> None:
    orch, _team, conv = await _recorded(tmp_path)
    try:
        wordy = Team()
        wordy_model = FunctionModel(
            lambda r: "Lovely! " + str(wordy(r)) if r.expert == "response" else wordy(r)
        )
        report = await _report(orch, conv, build_runner(orch, models={"default": wordy_model}))
        assert report.exit_code == 0
        assert all(d.reply_changed for d in report.diffs)
        assert report.diffs[0].reply_diff[-1].startswith("+Lovely! ok, 1 bag(s)")
    finally:
        await orch.aclose()


async def test_replay_with_another_prompt_folder(tmp_path: Path) -> None:
    orch, _team, conv = await _recorded(tmp_path)
    try:
        prompts = tmp_path / "prompts"
        prompts.mkdir()
        import frontdesk.prompts as prompt_pkg

        source = Path(prompt_pkg.__file__).parent / "triage.md"
        text = source.read_text().replace("\n---\n", "\n---\nALWAYS BE BRIEF.\n", 1)
        (prompts / "triage.md").write_text(text)
        seen = Team()
        await _report(
            orch,
            conv,
            build_runner(orch, prompts_dir=prompts, models={"default": FunctionModel(seen)}),
        )
        triage_systems = {c.system for c in seen.calls if c.expert == "triage"}
        assert len(triage_systems) == 1 and "ALWAYS BE BRIEF." in triage_systems.pop()
    finally:
        await orch.aclose()


def test_need_more_info_change_gates() -> None:
    from frontdesk.audit.replay import RecordedTurn
    from frontdesk.audit.transcript import TurnView

    view = TurnView("t1", category="ORDERS", need_more_info={"missing": ["bags"], "question": "?"})
    turn = RecordedTurn("c", 1, view)
    same = compare(turn, ReplayResult("ORDERS", None, {"missing": ["bags"], "question": "How?"}))
    assert not same.gating  # only the wording of the question changed
    other = compare(turn, ReplayResult("ORDERS", None, {"missing": ["variety"], "question": "?"}))
    assert other.need_more_info_changed and other.gating


def test_parse_models() -> None:
    assert parse_models([]) is None
    assert parse_models(["recorded"]) == "recorded"
    assert parse_models(["triage=offline", "openai:gpt-4.1"]) == {
        "triage": "offline",
        "default": "openai:gpt-4.1",
    }
    with pytest.raises(ConfigError, match="unknown expert 'triag'"):
        parse_models(["triag=offline"])
    with pytest.raises(ConfigError, match="alone"):
        parse_models(["recorded", "triage=offline"])
