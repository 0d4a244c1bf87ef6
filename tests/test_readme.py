"""The README's code runs as written: its Python block against the offline model."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

pytestmark = pytest.mark.anyio


def _python_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.DOTALL | re.MULTILINE)


def _offline(block: str, store: str) -> str:
    """The block with the offline model and a private store; fails if either is not there."""
    model = 'model="anthropic:claude-sonnet-4-5"'
    db = 'store="sqlite:///frontdesk.db"'
    assert block.count(model) == 1 and block.count(db) == 1, "the README block changed shape"
    return block.replace(model, 'model="offline"').replace(db, f"store={store!r}")


def test_the_readme_has_one_python_block() -> None:
    assert len(_python_blocks(README.read_text(encoding="utf-8"))) == 1


async def test_the_library_in_one_screen_runs_as_written(tmp_path: Path) -> None:
    """Run with top-level await, as a notebook would; then check what it left behind."""
    (block,) = _python_blocks(README.read_text(encoding="utf-8"))
    source = _offline(block, f"sqlite:///{tmp_path / 'readme.db'}")
    code = compile(
        source, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    namespace: dict[str, Any] = {"__name__": "readme"}
    result = eval(code, namespace)  # top-level await: eval gives a coroutine
    if result is not None:
        await result
    reply = namespace["reply"]
    assert reply.category == "ORDERS"
    assert reply.request.model_dump() == {"variety": "purple", "bags": 1}
    assert reply.text.startswith("[offline]")
    assert reply.message_id and reply.user_message_id


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
