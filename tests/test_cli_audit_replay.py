"""`frontdesk audit replay`: recorded responses (exit 0) and a changed app (exit 1)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.cli import app

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
