"""The docs' code runs as written: every Python block of these pages, in order.

Each page's blocks run in one namespace, as a notebook would (top-level `await` allowed),
in a fresh working folder, with the one real model spec they name replaced by the offline
stand-in (no key, no network). A block that stops running, or a page that gains a block
this test does not run, fails here.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = ["README.md", "docs/adding-a-category.md", "docs/testing.md", "docs/profiles.md"]
REAL_MODEL = '"anthropic:claude-sonnet-4-5"'

pytestmark = pytest.mark.anyio


def python_blocks(markdown: str) -> list[str]:
    """The fenced ```python blocks of a page, in order."""
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.DOTALL | re.MULTILINE)


async def run_page(page: str, namespace: dict[str, Any]) -> int:
    """Run every Python block of `page` in `namespace`; how many ran."""
    blocks = python_blocks((ROOT / page).read_text(encoding="utf-8"))
    for number, block in enumerate(blocks, start=1):
        source = block.replace(REAL_MODEL, '"offline"')
        code = compile(
            source,
            f"{page} block {number}",
            "exec",
            flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
            dont_inherit=True,
        )
        result = eval(code, namespace)  # With top-level await, eval gives a coroutine.
        if inspect.iscoroutine(result):
            await result
    return len(blocks)


@pytest.mark.parametrize("page", PAGES)
async def test_every_python_block_runs(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # The blocks' sqlite:///x.db files land here.
    namespace: dict[str, Any] = {"__name__": "docs"}
    ran = await run_page(page, namespace)
    assert ran >= 1
    orch = namespace.get("orch")
    if orch is not None:
        await orch.aclose()


async def test_the_category_example_checks_what_the_handler_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Section 4 passes a user and asserts on the outcome, so a failing handler fails it."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs"}
    await run_page("docs/adding-a-category.md", namespace)
    reply = namespace["reply"]
    assert reply.outcome.data == {"frozen": "4242"}
    assert [(u, c) for u, c, _ in namespace["bank"].frozen] == [("alice", "4242")]
    text = (ROOT / "docs/adding-a-category.md").read_text(encoding="utf-8")
    assert 'user_id="alice"' in python_blocks(text)[-1]


def test_the_pages_name_only_one_real_model_spec() -> None:
    """The substitution above is the only change made to the blocks: no other spec string
    (which would need a key) may appear in them."""
    for page in PAGES:
        for block in python_blocks((ROOT / page).read_text(encoding="utf-8")):
            specs = re.findall(r'"(?:anthropic|openai):[^"]+"', block)
            assert set(specs) <= {REAL_MODEL}, (page, specs)
