"""`frontdesk demo` as a CI job or a pipe runs it: no TTY, stdin closed, output piped."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def test_demo_runs_to_the_end_without_a_tty(tmp_path: Path) -> None:
    cli = Path(sys.executable).with_name("frontdesk")
    env = {k: v for k, v in os.environ.items() if k != "TERM"}
    # As a newcomer runs it: the venv is not activated, `frontdesk` is not on PATH.
    venv = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv)
    done = subprocess.run(
        [str(cli), "demo"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "frontdesk thread show demo-" in done.stdout
    # Every command it prints runs as printed, in a shell without the venv on PATH.
    printed = [line.strip() for line in done.stdout.splitlines() if "frontdesk " in line]
    printed = [line for line in printed if line.startswith(("/", "'", "frontdesk", "."))]
    assert len(printed) == 5 and printed[-1].endswith(" demo --serve"), printed
    for command in printed[:-1]:
        again = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )
        assert again.returncode == 0, (command, again.stderr)
    assert "Traceback" not in done.stderr
    # The policy question is answered from the shop's help page, and the reply cites it.
    flat = " ".join(done.stdout.replace("│", " ").split())
    assert "potato_shop/help.md - Storing potatoes (v1)" in flat
    assert "never in the fridge" in flat
    # Each run gets a fresh database of its own (so a second run behaves as the first), and
    # the demo says where it is.
    found = re.search(r"--db sqlite:///(\S+)", done.stdout)
    assert found is not None, done.stdout
    assert Path(found.group(1)).exists()
    assert not (tmp_path / "frontdesk.db").exists()
