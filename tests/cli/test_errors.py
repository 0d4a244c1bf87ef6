"""The real `frontdesk` command in a subprocess: every failure is one `error:` line, exit 2.

One error handler (cli/_errors.py) serves every command; these tests run the
console entry point as a user would, so a traceback anywhere on the way would show here.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

DEAD_PG = "postgresql://nobody@127.0.0.1:1/x"
ENTRY = "from frontdesk.cli import main; main()"


def frontdesk(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run `frontdesk ARGS` in a fresh interpreter; no provider keys unless given."""
    base = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    base.pop("FRONTDESK_DEBUG", None)
    base["COLUMNS"] = "80"
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args],
        cwd=cwd,
        env={**base, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_clean_failure(result: subprocess.CompletedProcess[str], *expected: str) -> None:
    """Exit 2, one `error:` line on stderr naming what to do, no traceback anywhere."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.fixture
def corrupt(tmp_path: Path) -> str:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not a SQLite file\n" * 200)
    return f"sqlite:///{path}"


def test_missing_api_key(tmp_path: Path) -> None:
    result = frontdesk(
        "chat", "--model", "anthropic:claude-sonnet-4-5", "--db", "sqlite:///f.db", cwd=tmp_path
    )
    assert_clean_failure(result, "ANTHROPIC_API_KEY")


def test_unknown_model_spec(tmp_path: Path) -> None:
    result = frontdesk("chat", "--model", "nonsense:x", "--db", "sqlite:///f.db", cwd=tmp_path)
    assert_clean_failure(result, "unknown model spec 'nonsense:x'")


def test_unknown_app(tmp_path: Path) -> None:
    result = frontdesk("chat", "--app", "nosuch:thing", "--db", "sqlite:///f.db", cwd=tmp_path)
    assert_clean_failure(result, "cannot import 'nosuch'")


def test_chat_on_a_dead_database_fails_before_the_prompt(tmp_path: Path) -> None:
    result = frontdesk("chat", "--model", "offline", "--db", DEAD_PG, cwd=tmp_path)
    assert_clean_failure(result, "cannot reach the database", "--db")
    assert "you>" not in result.stdout


def test_chat_on_a_corrupt_sqlite_file(tmp_path: Path, corrupt: str) -> None:
    result = frontdesk("chat", "--model", "offline", "--db", corrupt, cwd=tmp_path)
    assert_clean_failure(result, "file is not a database", "--db")


@pytest.mark.parametrize("command", [["audit", "show", "c1"], ["audit", "verify", "--all"]])
def test_audit_on_a_dead_or_corrupt_database(
    tmp_path: Path, corrupt: str, command: list[str]
) -> None:
    assert_clean_failure(frontdesk(*command, "--db", DEAD_PG, cwd=tmp_path), "database")
    assert_clean_failure(
        frontdesk(*command, "--db", corrupt, cwd=tmp_path), "file is not a database"
    )


def test_read_only_sqlite_file(tmp_path: Path) -> None:
    """A database the process may read but not write (SQLite's own read-only mode)."""
    path = tmp_path / "ro.db"
    sqlite3.connect(path).close()
    url = f"sqlite:///file:{path}?mode=ro&uri=true"
    result = frontdesk("chat", "--model", "offline", "--db", url, cwd=tmp_path)
    assert_clean_failure(result, "readonly", "--db")


def test_traceback_on_request(tmp_path: Path) -> None:
    """`--traceback` and FRONTDESK_DEBUG=1 show the traceback for a bug report."""
    args = ("chat", "--model", "nonsense:x", "--db", "sqlite:///f.db")
    shown = frontdesk("--traceback", *args, cwd=tmp_path)
    assert shown.returncode != 0 and "Traceback" in shown.stderr
    assert "UnknownModelSpec" in shown.stderr
    debug = frontdesk(*args, cwd=tmp_path, env={"FRONTDESK_DEBUG": "1"})
    assert "Traceback" in debug.stderr


def test_app_module_in_the_working_directory(tmp_path: Path) -> None:
    """Like uvicorn, `--app mod:attr` imports a module from the working directory."""
    (tmp_path / "myshop.py").write_text(
        "from frontdesk.examples.potato_shop import build\n", encoding="utf-8"
    )
    result = frontdesk(
        "chat", "--app", "myshop:build", "--model", "offline", "--db", "sqlite:///f.db",
        cwd=tmp_path, stdin="/quit\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "you>" in result.stdout
