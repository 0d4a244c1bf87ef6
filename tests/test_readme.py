"""The README's code runs as written: its Python block is a file that runs offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
ONE_SCREEN = ROOT / "examples" / "one_screen.py"


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.DOTALL | re.MULTILINE)


def test_the_readme_has_one_python_block() -> None:
    assert len(_python_blocks(README.read_text(encoding="utf-8"))) == 1


def test_the_library_in_one_screen_is_a_file_that_runs_as_written(tmp_path: Path) -> None:
    """The README's block is `examples/one_screen.py` exactly, and that file runs offline as
    a plain script (no top-level await, no key), in a fresh folder."""
    (block,) = _python_blocks(README.read_text(encoding="utf-8"))
    assert block == ONE_SCREEN.read_text(encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    (tmp_path / "example.py").write_text(block, encoding="utf-8")  # as a reader pastes it
    done = subprocess.run(
        [sys.executable, "example.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("[offline]") and lines[1] == "ORDERS"
    assert lines[2] == "variety='purple' bags=1" and lines[3] == "3 branches"


def test_the_readme_imports_only_the_public_namespace() -> None:
    """Every `from X import` / `import X` in a README or docs code block names `frontdesk`."""
    texts = [README, *sorted((ROOT / "docs").glob("*.md"))]
    wrong: dict[str, list[str]] = {}
    for path in texts:
        for block in _python_blocks(path.read_text(encoding="utf-8")):
            for module in re.findall(r"^\s*(?:from|import)\s+([\w.]+)", block, re.MULTILINE):
                top = module.split(".")[0]
                if top in {"experts", "orchestrator", "threads", "audit", "prompts", "examples"}:
                    wrong.setdefault(path.name, []).append(module)
    assert wrong == {}
