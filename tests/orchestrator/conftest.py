"""Fixtures for pipeline tests: a scriptable fake model per expert and a fresh store."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from frontdesk.experts.providers import FunctionModel, ModelRequest
from tests.experts.providers.conftest import (  # noqa: F401 (fixtures)
    _wire_server,
    closed_port_url,
    wire,
)

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def scenario() -> Callable[[str], dict[str, Any]]:
    """Load a conversation from tests/data (copies of the shared domain scenarios)."""

    def load(name: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
        return data

    return load


@dataclass
class FakeTeam:
    """One FunctionModel answering for every expert, recording every request."""

    route: Callable[[ModelRequest], str] = lambda r: "OTHER"
    triage: Callable[[ModelRequest], Any] | None = None
    """The whole triage answer (several categories, a `Clarify`), in place of `route`'s."""
    extract: Callable[[ModelRequest], dict[str, Any]] = lambda r: {}
    summarise: Callable[[ModelRequest], str] = lambda r: "summary"
    calls: list[ModelRequest] = field(default_factory=list)

    def reply_for(self, request: ModelRequest) -> str:
        """A reply that shows which instruction it followed (the instruction never leaks)."""
        return f"reply #{sum(1 for c in self.calls if c.expert == 'response')}"

    def __call__(self, request: ModelRequest) -> Any:
        self.calls.append(request)
        if request.expert == "triage":
            if self.triage is not None:
                return self.triage(request)
            return {"category": self.route(request), "reason": "test"}
        if request.expert == "request":
            return self.extract(request)
        if request.expert == "summariser":
            return self.summarise(request)
        if request.expert == "memory":  # Runs after each reply of a turn with a user_id.
            return {"facts": []}
        return self.reply_for(request)

    def model(self) -> FunctionModel:
        return FunctionModel(self)

    def of(self, expert: str) -> list[ModelRequest]:
        return [c for c in self.calls if c.expert == expert]


@pytest.fixture
def team() -> FakeTeam:
    return FakeTeam()


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'frontdesk.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_url(request: pytest.FixtureRequest, db_url: str) -> str:
    """The conversation database on each backend: a SQLite file, or a fresh PostgreSQL
    database of this test's own (`fresh_pg_url`)."""
    if request.param == "sqlite":
        return db_url
    return str(request.getfixturevalue("fresh_pg_url"))
