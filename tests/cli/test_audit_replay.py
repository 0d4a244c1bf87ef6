"""`frontdesk audit replay`: recorded responses (exit 0) and a changed app (exit 1)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from frontdesk import Category, HandlerContext, Outcome
from frontdesk.cli import app
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, Model, ModelRequest
from frontdesk.orchestrator import Orchestrator

runner = CliRunner()


def _team(bags: int) -> FunctionModel:
    def answer(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "ORDERS", "reason": "buying"}
        if request.expert == "request":
            return {"request": {"variety": "purple", "bags": bags}, "need_more_info": None}
        return f"ok, {bags} bag(s): please confirm"

    return FunctionModel(answer)


def same() -> Orchestrator:
    """The app as it was recorded (for `--app`)."""
    return Orchestrator(categories(), model=_team(1), audit=False)


def more_bags() -> Orchestrator:
    """An app whose request expert now extracts 3 bags (for `--app`)."""
    return Orchestrator(categories(), model=_team(3), audit=False)


async def _record(url: str) -> None:
    orch = Orchestrator(categories(), model=_team(1), store=url)
    try:
        for conv in ("c1", "c2"):
            await orch.handle(conv, "I'd like a bag of purple potatoes")
    finally:
        await orch.aclose()


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'fd.db'}"
    asyncio.run(_record(url))
    return url


def test_recorded_replay_exits_0(db: str) -> None:
    result = runner.invoke(
        app,
        [
            "audit",
            "replay",
            "--all",
            "--model",
            "recorded",
            "--app",
            f"{__name__}:same",
            "--db",
            db,
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "2 turn(s) replayed: no category or request changed" in result.output
    assert "replay summary" in result.output


def test_changed_request_exits_1_and_names_the_field(db: str) -> None:
    result = runner.invoke(
        app,
        ["audit", "replay", "c1", "--app", f"{__name__}:more_bags", "--db", db],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 1, result.output
    assert "request.bags: 1 -> 3" in result.output
    assert "changes found" in result.output


def test_unknown_expert_in_model_is_a_clear_error(db: str) -> None:
    result = runner.invoke(
        app,
        [
            "audit",
            "replay",
            "c1",
            "--model",
            "triag=offline",
            "--app",
            f"{__name__}:same",
            "--db",
            db,
        ],
    )
    assert result.exit_code == 2 and "unknown expert 'triag'" in result.output


# -- a long offline conversation: budget-cut per expert, and compacted ---------------------

LONG_TURNS = [
    "I'd like to buy a bag of purple potatoes " + "please " * 60,
    "Actually make it two bags " + "really " * 60,
    "Where is my order 77120? " + "thanks " * 60,
    "Hi, my order 88213 arrived late, refund the delivery fee " + "ok " * 60,
]


def shop_with_other_request_model() -> Orchestrator:
    """The potato shop whose request expert is a different model (for `--app`)."""
    model: dict[str, str | Model] = {"default": "offline", "request": _other_request_model()}
    return Orchestrator(categories(), model=model, audit=False, shop_name="Spud & Co.")


def _other_request_model() -> FunctionModel:
    """Extracts 7 bags of purple for an order, and what offline extracts otherwise."""
    from frontdesk.experts.providers import model_from_spec

    offline = model_from_spec("offline")

    async def answer(request: ModelRequest) -> Any:
        response = await offline.request(request)
        output = response.output
        if hasattr(output, "model_dump"):
            output = output.model_dump(mode="json")
        if isinstance(output, dict) and isinstance(output.get("request"), dict):
            if "variety" in output["request"]:
                output = {**output, "request": {**output["request"], "bags": 7}}
        return output

    return FunctionModel(answer)


async def _record_long(url: str) -> None:
    from frontdesk.examples.potato_shop import build

    orch = build(model="offline", store=url)
    try:
        for i in range(24):
            await orch.handle("long", LONG_TURNS[i % 4] + f" (turn {i})")
    finally:
        await orch.aclose()


@pytest.fixture(scope="module")
def long_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('long') / 'fd.db'}"
    asyncio.run(_record_long(url))
    return url


def test_the_long_conversation_was_budget_cut_and_compacted(long_db: str) -> None:
    """The fixture is what the next tests need: experts sent different cuts, a summary."""
    from frontdesk.audit.replay import recorded_turns
    from frontdesk.audit.store import AuditLog
    from frontdesk.audit.transcript import build_transcript

    async def read() -> list[Any]:
        async with await AuditLog.open(long_db) as log:
            return recorded_turns(build_transcript("long", await log.events("long")))

    turns = asyncio.run(read())
    cut = [t for t in turns if len(t.sent("request") or t.messages) != len(t.messages)]
    assert cut, "no turn where the request expert was sent another cut than triage"
    shown = runner.invoke(app, ["thread", "show", "long", "--db", long_db])
    assert "summarised" in shown.output


def test_unchanged_offline_setup_replays_with_no_change(long_db: str) -> None:
    result = runner.invoke(
        app, ["audit", "replay", "long", "--model", "offline", "--db", long_db],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "24 turn(s) replayed: no category or request changed" in result.output
    same_default = runner.invoke(
        app, ["audit", "replay", "long", "--model", "default=offline", "--db", long_db]
    )
    assert same_default.exit_code == 0, same_default.output


def test_a_changed_request_model_is_found(long_db: str) -> None:
    result = runner.invoke(
        app,
        ["audit", "replay", "long", "--app", f"{__name__}:shop_with_other_request_model",
         "--db", long_db],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "request.bags:" in result.output and "-> 7" in result.output


def test_compactions_are_not_numbered_as_turns(long_db: str, tmp_path: Path) -> None:
    shown = runner.invoke(app, ["audit", "show", "long", "--db", long_db], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "24 turn(s) on the active path, 24 recorded" in shown.output
    assert "compaction after message" in shown.output and "(not a turn)" in shown.output
    page = tmp_path / "long.html"
    html = runner.invoke(
        app, ["audit", "export", "long", "--format", "html", "-o", str(page), "--db", long_db]
    )
    assert html.exit_code == 0 and "wrote 24 turns" in html.output
    text = page.read_text(encoding="utf-8")
    assert text.count('class="turn"') == 24 and "compaction(s) (not turns)" in text


def test_a_turns_wall_clock_includes_the_waits_between_attempts() -> None:
    from frontdesk.audit.transcript import TurnView

    turn = TurnView(
        turn_id="t",
        started_at="2026-01-01T00:00:00+00:00",
        ended_at="2026-01-01T00:00:02.500000+00:00",
    )
    assert turn.latency_ms == 0 and turn.wall_ms == 2500


# -- the recorded app: replay loads it, or refuses an app without the recorded categories --

REPO = Path(__file__).resolve().parents[2]


class Balance(BaseModel):
    account: str


class Freeze(BaseModel):
    card_last4: str


async def _ok(request: BaseModel, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Tell the user it is done.")


def bank(model: Any = None) -> Orchestrator:
    """A bank's app: categories the potato shop does not have (for `--app`)."""

    def answer(request: ModelRequest) -> Any:
        text = str(request.messages[-1]["content"]) if request.messages else ""
        freeze = "freeze" in text.lower()
        if request.expert == "triage":
            return {"category": "FREEZE_CARD" if freeze else "BALANCE", "reason": "bank"}
        if request.expert == "request":
            req = {"card_last4": "4242"} if freeze else {"account": "current"}
            return {"request": req, "need_more_info": None}
        return "Done."

    return Orchestrator(
        [
            Category(
                name="BALANCE",
                description="Account balance",
                request=Balance,
                handler=_ok,
                examples=["What is my balance?"],
            ),
            Category(
                name="FREEZE_CARD",
                description="Freeze a card",
                request=Freeze,
                handler=_ok,
                examples=["Freeze my card"],
            ),
        ],  # fmt: skip
        model=FunctionModel(answer) if model is None else model,
        audit=False,
        memory=False,
    )


async def _record_bank(url: str, spec: str | None) -> None:
    orch = bank()
    orch = Orchestrator(
        list(orch.categories.values()), model=orch.models["triage"], store=url, memory=False
    )
    orch.app_spec = spec  # As `load_app(spec)` sets it (None: built in code).
    try:
        await orch.handle("bank-1", "What is my balance?", user_id="alice")
        await orch.handle("bank-1", "Please freeze my card", user_id="alice")
    finally:
        await orch.aclose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def bank_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'bank.db'}"
    return str(request.getfixturevalue("fresh_pg_url"))


def _frontdesk(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO)}
    env.pop("FRONTDESK_DB", None)
    return subprocess.run(
        [str(Path(sys.executable).parent / "frontdesk"), *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120,
    )  # fmt: skip


def test_replay_without_app_refuses_an_app_lacking_the_recorded_categories(
    bank_url: str,
) -> None:
    asyncio.run(_record_bank(bank_url, None))  # Built in code: no spec recorded.
    wrong = _frontdesk("audit", "replay", "bank-1", "--db", bank_url)
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert (
        "recorded categories BALANCE, FREEZE_CARD are not in frontdesk.examples.potato_shop:"
        " pass --app" in " ".join(wrong.stderr.split())
    )
    assert "BALANCE -> " not in wrong.stdout  # Never reported as a change.
    right = _frontdesk(
        "audit", "replay", "bank-1", "--app", f"{__name__}:bank", "--model", "recorded",
        "--db", bank_url,
    )  # fmt: skip
    assert right.returncode == 0, right.stdout + right.stderr
    assert "2 turn(s) replayed: no category or request changed" in right.stdout


def test_replay_loads_the_recorded_app_and_reports_unknown_categories_as_such(
    bank_url: str,
) -> None:
    asyncio.run(_record_bank(bank_url, f"{__name__}:bank"))
    recorded = _frontdesk("audit", "replay", "bank-1", "--model", "recorded", "--db", bank_url)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    assert f"replaying with the recorded app {__name__}:bank" in recorded.stdout
    other = _frontdesk(
        "audit", "replay", "bank-1", "--app", "frontdesk.examples.potato_shop:build",
        "--db", bank_url,
    )  # fmt: skip
    assert other.returncode == 2, other.stdout + other.stderr
    assert "recorded category BALANCE is unknown to the replaying app" in other.stdout
    assert "category: BALANCE ->" not in other.stdout and "changes found" not in other.stdout
    assert "0 turn(s) replayed" in other.stdout
    assert "recorded categories BALANCE, FREEZE_CARD are not in" in " ".join(other.stderr.split())
