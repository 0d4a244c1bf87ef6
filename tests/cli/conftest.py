"""Shared by the CLI tests: a database a test module records once, and a command's JSON."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from typer.testing import CliRunner

from frontdesk.cli import app

runner = CliRunner()


@pytest.fixture(scope="module")
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A SQLite database filled once per test module by its `record(url)` coroutine."""
    record: Callable[[str], Coroutine[Any, Any, None]] = request.module.record
    name = request.module.__name__.rpartition(".")[2]
    url = f"sqlite:///{tmp_path_factory.mktemp(name) / 'fd.db'}"
    asyncio.run(record(url))
    return url


def cli_json(*args: str) -> Any:
    """`frontdesk ARGS` run in this process; its stdout read as JSON (exit 0 asserted)."""
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
