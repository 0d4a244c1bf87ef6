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
    assert "Traceback" not in done.stderr
    # Each run gets a fresh database of its own (so a second run behaves as the first), and
    # the demo says where it is.
    found = re.search(r"--db sqlite:///(\S+)", done.stdout)
    assert found is not None, done.stdout
    assert Path(found.group(1)).exists()
    assert not (tmp_path / "frontdesk.db").exists()
