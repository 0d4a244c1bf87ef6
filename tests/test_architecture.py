"""The architecture stays visible: imports flow downward, packages export sorted `__all__`."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What each package may import from the project (besides itself).
ALLOWED = {
    "frontdesk": set(),
    "prompts": {"frontdesk"},
    "threads": {"frontdesk"},
    "audit": {"frontdesk"},
    "experts": {"frontdesk", "prompts"},
    "orchestrator": {"frontdesk", "prompts", "experts", "threads", "audit"},
    "examples": {"frontdesk", "experts", "orchestrator"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found & set(ALLOWED)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_flow_downward(package: str) -> None:
    wrong = {}
    for path in (ROOT / package).rglob("*.py"):
        if "migrations" in path.parts:
            continue  # Alembic's env imports the table definitions of every package.
        upward = imported_packages(path) - ALLOWED[package] - {package}
        if upward:
            wrong[str(path.relative_to(ROOT))] = sorted(upward)
    assert wrong == {}


@pytest.mark.parametrize(
    "module", ["experts", "experts.providers", "orchestrator", "prompts", "frontdesk"]
)
def test_public_names_are_exported_sorted(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert names == sorted(names)
    for name in names:
        assert hasattr(mod, name), f"{module}.__all__ names {name} but it is missing"


def test_design_public_surface_is_importable() -> None:
    from experts import Category, NeedMoreInfo, Outcome
    from experts.providers import (
        FunctionModel,
        ModelRequest,
        ModelResponse,
        ScriptedModel,
        model_from_spec,
    )
    from orchestrator import Orchestrator, Reply

    assert all(
        [Category, Outcome, NeedMoreInfo, FunctionModel, ScriptedModel, ModelRequest]
        + [ModelResponse, model_from_spec, Orchestrator, Reply]
    )
