"""`frontdesk init`: a new project whose README's two commands run offline at once, with
nothing but an interpreter that has frontdesk installed (this one)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from frontdesk.cli import app as cli


def _readme_commands(project: Path) -> list[list[str]]:
    """The commands of the README's first bash block, `python` meaning this interpreter."""
    block = re.search(r"```bash\n(.*?)```", (project / "README.md").read_text(), re.S)
    assert block is not None
    commands = [shlex.split(line.split("#")[0]) for line in block.group(1).splitlines()]
    assert [c[0] for c in commands] == ["python", "python"], commands
    return [[sys.executable, *c[1:]] for c in commands]


def test_init_writes_a_project_whose_two_readme_commands_run_offline(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "my-bot"), "--name", "Acme Goods"])
    assert result.exit_code == 0, result.output
    project = tmp_path / "my-bot"
    assert (project / "my_bot" / "bot.py").is_file() and (project / "pyproject.toml").is_file()
    assert 'dependencies = ["frontdesk>=0.1"]' in (project / "pyproject.toml").read_text()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}  # offline
    outputs = []
    for command in _readme_commands(project):
        done = subprocess.run(
            command, cwd=project, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        outputs.append(done.stdout)
    example, tested = outputs
    assert "category=ORDER_STATUS" in example and "shipped" in example
    assert "category=OPENING_HOURS" in example and "sources=['help.md']" in example
    assert "all passed" in tested and "2 conversation(s)" in tested


def test_init_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "taken")])
    assert result.exit_code == 2 and "not an empty folder" in result.output
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"
