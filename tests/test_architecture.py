"""The architecture stays visible: imports flow downward, packages export sorted `__all__`."""

from __future__ import annotations

import ast
import importlib
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The design card's folders, each installed as `frontdesk.<folder>`.
FOLDERS = ("experts", "orchestrator", "threads", "audit", "prompts", "examples", "service", "cli")

# What each folder may import from the project (besides itself). "core" is the package root's
# plumbing (`frontdesk.errors`, `.logs`, `.db`, `.schema`), which every folder may use.
ALLOWED = {
    "core": set(),
    "prompts": {"core"},
    "threads": {"core"},
    "audit": {"core"},
    "experts": {"core", "prompts"},
    "orchestrator": {"core", "prompts", "experts", "threads", "audit"},
    "examples": {"core", "experts", "orchestrator"},
    # The HTTP service sits on the orchestrator; only the CLI above imports it.
    "service": {"core", "prompts", "experts", "threads", "audit", "orchestrator"},
    # The command line sits on top of everything; nothing imports it.
    "cli": {*FOLDERS, "core"} - {"cli"},
}

# The public face re-exports from every folder, so it sits above them all.
FACE = {"__init__.py", "testing.py"}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


def _layer(module: str) -> str | None:
    """Which layer an absolute import names: a folder, "core", or None (not the project)."""
    parts = module.split(".")
    if parts[0] != "frontdesk":
        return None
    if len(parts) > 1 and parts[1] in FOLDERS:
        return parts[1]
    return "core"


def _sources(folder: str) -> list[Path]:
    base = ROOT / ("frontdesk" if folder == "core" else folder)
    paths = [p for p in base.rglob("*.py") if "migrations" not in p.parts]
    if folder == "core":
        paths = [p for p in paths if p.parent != base or p.name not in FACE]
    return paths


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_imports_flow_downward(folder: str) -> None:
    wrong = {}
    for path in _sources(folder):
        layers = {_layer(m) for m in _imports(path)} - {None, folder}
        upward = layers - ALLOWED[folder]
        if upward:
            wrong[str(path.relative_to(ROOT))] = sorted(str(u) for u in upward)
    assert wrong == {}


def test_nothing_imports_the_old_top_level_names() -> None:
    """`experts`, `audit`, ... are not importable names of an install: only `frontdesk.*` is."""
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    offenders = {
        path: old
        for path in tracked
        for old in _imports(ROOT / path)
        if old.split(".")[0] in FOLDERS
    }
    assert offenders == {}


def test_the_wheel_layout_maps_every_folder_under_frontdesk() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    setup = config["tool"]["setuptools"]
    assert setup["package-dir"] == {"frontdesk": "frontdesk"} | {
        f"frontdesk.{folder}": folder for folder in FOLDERS
    }
    on_disk = set()
    for folder in ("frontdesk", *FOLDERS):
        for d in [ROOT / folder, *(ROOT / folder).rglob("*")]:
            if d.is_dir() and d.name != "__pycache__":
                inner = d.relative_to(ROOT / folder).parts
                prefix = ["frontdesk"] if folder == "frontdesk" else ["frontdesk", folder]
                on_disk.add(".".join([*prefix, *inner]))
    assert sorted(setup["packages"]) == sorted(on_disk)


@pytest.mark.parametrize(
    "module",
    [
        "frontdesk",
        "frontdesk.errors",
        "frontdesk.experts",
        "frontdesk.experts.providers",
        "frontdesk.orchestrator",
        "frontdesk.prompts",
        "frontdesk.audit",
        "frontdesk.testing",
        "frontdesk.threads",
        "frontdesk.service",
    ],
)
def test_public_names_are_exported_sorted(module: str) -> None:
    mod = importlib.import_module(module)
    names = list(mod.__all__)
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))  # constants first
    for name in names:
        assert hasattr(mod, name), f"{module}.__all__ names {name} but it is missing"


def test_design_public_surface_is_importable() -> None:
    import frontdesk
    from frontdesk import (
        Category,
        HandlerContext,
        Handoff,
        NeedMoreInfo,
        Orchestrator,
        Outcome,
        Reply,
        SyncOrchestrator,
    )
    from frontdesk.errors import (
        ConversationBusy,
        FrontdeskError,
        IdempotencyConflict,
        InvalidUserText,
        NotHandedOff,
        TurnFailed,
    )
    from frontdesk.experts.providers import model_from_spec
    from frontdesk.testing import FunctionModel, ModelRequest, ModelResponse, ScriptedModel

    for error in (ConversationBusy, IdempotencyConflict, InvalidUserText, NotHandedOff, TurnFailed):
        assert issubclass(error, FrontdeskError)
    assert frontdesk.Orchestrator is Orchestrator
    assert all(
        [Category, HandlerContext, Handoff, NeedMoreInfo, Outcome, Reply, SyncOrchestrator]
        + [FunctionModel, ScriptedModel, ModelRequest, ModelResponse, model_from_spec]
    )


def test_every_public_error_is_in_the_one_tree() -> None:
    """The packages' `errors` modules re-export `frontdesk.errors`; none defines its own."""
    import frontdesk.errors as tree

    for module in ("experts", "threads", "audit", "orchestrator"):
        mod = importlib.import_module(f"frontdesk.{module}.errors")
        for name in mod.__all__:
            assert getattr(mod, name) is getattr(tree, name), f"{module}.errors.{name}"


def test_the_cli_is_the_frontdesk_console_script() -> None:
    """`frontdesk` runs `frontdesk.cli:main`, the top-level `cli/` folder's entry point."""
    import frontdesk.cli

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["project"]["scripts"] == {"frontdesk": "frontdesk.cli:main"}
    assert callable(frontdesk.cli.main)
    assert frontdesk.cli.__file__ is not None
    assert Path(frontdesk.cli.__file__).resolve() == ROOT / "cli" / "__init__.py"


def test_the_orchestrator_holds_no_cli() -> None:
    """The CLI lives in `cli/`, above the service: no orchestrator module is named for it."""
    named = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "orchestrator").rglob("*")
        if p.stem == "cli" or p.stem.startswith("_cli")
    ]
    assert named == []


def test_nothing_imports_the_cli() -> None:
    """The service (and every other folder) imports nothing from `frontdesk.cli`, not even
    lazily inside a function: the CLI is the top of the stack."""
    importers = {
        str(path.relative_to(ROOT)): module
        for folder in ALLOWED
        if folder != "cli"
        for path in _sources(folder)
        for module in _imports(path)
        if _layer(module) == "cli"
    }
    assert importers == {}
    service = [m for p in _sources("service") for m in _imports(p)]
    assert any(_layer(m) == "orchestrator" for m in service)  # the check does see imports
