"""The architecture stays visible: imports flow downward, packages export sorted `__all__`."""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The design card's folders, each installed as `frontdesk.<folder>`.
FOLDERS = (
    "experts",
    "jobs",
    "orchestrator",
    "devkit",
    "threads",
    "audit",
    "prompts",
    "examples",
    "service",
    "cli",
)

# What each folder may import from the project (besides itself). "core" is the package root's
# plumbing (`frontdesk.errors`, `.logs`, `.db`, `.schema`), which every folder may use.
ALLOWED = {
    "core": set(),
    "prompts": {"core"},
    # The job rows and their runner: below the store, which records a turn's jobs in the
    # turn's own transaction.
    "jobs": {"core"},
    "threads": {"core", "jobs"},
    "audit": {"core"},
    "experts": {"core", "prompts"},
    "orchestrator": {"core", "prompts", "experts", "jobs", "threads", "audit"},
    # The developer's kit (loading an app, conversation tests, replay, handler doubles) runs
    # the orchestrator from outside: nothing below it imports it.
    "devkit": {"core", "prompts", "experts", "jobs", "threads", "audit", "orchestrator"},
    "examples": {"core", "experts", "orchestrator"},
    # The HTTP service sits on the orchestrator (and loads the app with the kit); only the
    # CLI above imports it.
    "service": {"core", "prompts", "experts", "jobs", "threads", "audit", "orchestrator", "devkit"},
    # The command line sits on top of everything; nothing imports it.
    "cli": {*FOLDERS, "core"} - {"cli"},
}

# The public face re-exports from every folder, so it sits above them all.
FACE = {"__init__.py", "__main__.py", "eval.py", "testing.py"}  # `python -m frontdesk` runs the CLI


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


# Private modules other packages may import: the fast path's seam (`frontdesk._driver`),
# documented in docs/architecture.md.
PRIVATE_SEAMS = {"frontdesk._driver"}


def _package_dirs() -> dict[str, Path]:
    """Every top-level package as pyproject maps it: `frontdesk.<folder>` -> its folder."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in mapping.items()}


def _module_names() -> dict[str, Path]:
    """Every module of the installed tree by dotted name (`frontdesk.threads.store`, ...)."""
    names: dict[str, Path] = {}
    for package, base in _package_dirs().items():
        for path in base.rglob("*.py"):
            inner = path.relative_to(base).with_suffix("").parts
            if inner[-1] == "__init__":
                inner = inner[:-1]
            names[".".join([package, *inner])] = path
    return names


def _top_package(module: str) -> str:
    """The folder a module belongs to: `frontdesk.threads` for `frontdesk.threads.x.y`,
    `frontdesk` for the root folder's own modules (`frontdesk.db`, `frontdesk._driver`)."""
    folders = {name for name in _package_dirs() if name != "frontdesk"}
    top = ".".join(module.split(".")[:2])
    return top if top in folders else "frontdesk"


def _imported_modules(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """The project modules `path` (module `name`) imports, relative imports resolved and
    `from package import _module` counted as importing that module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules}
    return {m for m in found if m == "frontdesk" or m.startswith("frontdesk.")}


def _private_owner(module: str) -> str | None:
    """The package a private module is private to (`frontdesk.threads` for
    `frontdesk.threads._writes`), or None when no part of the name is underscore-private."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[: i + 1])
    return None


def cross_package_private_imports(
    modules: dict[str, Path] | None = None,
) -> list[tuple[str, str]]:
    """(importer, private module) pairs where a module imports another folder's `_name`."""
    modules = _module_names() if modules is None else modules
    wrong = []
    for name, path in sorted(modules.items()):
        for imported in sorted(_imported_modules(path, name, modules)):
            private = _private_owner(imported)
            if private is None or private in PRIVATE_SEAMS:
                continue
            if _top_package(private) != _top_package(name):
                wrong.append((name, imported))
    return wrong


def test_no_package_imports_another_packages_private_module() -> None:
    """Outside `frontdesk._driver`, a `frontdesk.X._name` module is X's own: a module of
    another folder `frontdesk.Y` that needs it wants a public name instead."""
    assert cross_package_private_imports() == []


def test_the_private_import_check_sees_every_form(tmp_path: Path) -> None:
    """The check is not vacuous: `import a._m`, `from a import _m`, `from a._m import x` and
    relative forms are each caught; the seam and a folder's own private modules are not."""
    modules = _module_names()
    assert "frontdesk.threads.store" in modules and "frontdesk._driver" in modules
    offender = tmp_path / "offender.py"
    offender.write_text(
        "import frontdesk.threads._tx\n"
        "from frontdesk.threads import _lease\n"
        "from frontdesk.threads._writes import get\n"
        "from ..audit import _keys\n"
        "from frontdesk._driver import writer\n"
        "from frontdesk.service import _api\n",
        encoding="utf-8",
    )
    tree = dict(modules)
    tree["frontdesk.service.offender"] = offender
    tree["frontdesk.audit._keys"] = offender  # a private module, named for the relative form
    found = {
        imported
        for importer, imported in cross_package_private_imports(tree)
        if importer == "frontdesk.service.offender"
    }
    assert found == {
        "frontdesk.threads._tx",
        "frontdesk.threads._lease",
        "frontdesk.threads._writes",
        "frontdesk.audit._keys",
    }


def _direct_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports (anywhere in it: a function's lazy import
    and a `TYPE_CHECKING` one count too, as both still tie the two modules together)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in modules}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:  # `from package import module`
                    found.add(f"{base}.{alias.name}")
                elif base in modules:
                    found.add(base)
    return found - {name}


def _import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while not component or component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return circles


def test_no_import_circle_among_the_modules() -> None:
    modules = _module_names()
    graph = {name: _direct_imports(name, path, modules) for name, path in modules.items()}
    assert "frontdesk.orchestrator._orchestrator" in graph["frontdesk.orchestrator.sync"]
    assert _import_circles(graph) == []


def test_the_orchestrator_imports_no_sqlalchemy() -> None:
    """SQL lives in the layer that owns the table; a connection's type is `frontdesk.db`'s."""
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            m for m in _imports(path) if m.split(".")[0] == "sqlalchemy"
        )
        for path in _sources("orchestrator")
        if any(m.split(".")[0] == "sqlalchemy" for m in _imports(path))
    }
    assert offenders == {}


def _public(cls: type) -> dict[str, object]:
    return {name: value for name, value in vars(cls).items() if not name.startswith("_")}


def test_sync_orchestrator_has_every_public_method_of_orchestrator() -> None:
    """The same parameters and return type, so the blocking API cannot drift again; only
    `stream` returns another type by necessity (a plain iterator of the same events)."""
    from collections.abc import AsyncGenerator, Iterator
    from typing import get_args, get_origin

    from frontdesk import Orchestrator, SyncOrchestrator
    from frontdesk.orchestrator.stream import TurnEvent

    ours, theirs = _public(Orchestrator), _public(SyncOrchestrator)
    assert sorted(set(theirs) - set(ours)) == ["close"]  # ...which also ends its event loop.
    assert sorted(set(ours) - set(theirs)) == []
    for name, member in ours.items():
        twin = theirs[name]
        if isinstance(member, property):
            assert isinstance(twin, property), name
            continue
        assert callable(member) and callable(twin), name
        a = inspect.signature(member, eval_str=True)
        b = inspect.signature(twin, eval_str=True)
        assert list(a.parameters.values()) == list(b.parameters.values()), name
        if name == "stream":
            assert get_origin(a.return_annotation) is AsyncGenerator
            assert get_origin(b.return_annotation) is Iterator
            assert get_args(a.return_annotation)[0] == get_args(b.return_annotation)[0]
            assert get_args(b.return_annotation) == (TurnEvent,)
        else:
            assert a.return_annotation == b.return_annotation, name


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


def test_the_developer_kit_has_its_own_room() -> None:
    """Loading an app, conversation tests, replay and the handler doubles live in `devkit/`,
    not in the engine's rooms; `frontdesk.testing` still gives the doubles."""
    import frontdesk.devkit.doubles
    import frontdesk.testing

    kit = {"app", "conversation_tests", "replay", "testing"}
    strays = [
        str(p.relative_to(ROOT))
        for room in ("orchestrator", "experts", "threads")
        for p in (ROOT / room).glob("*.py")
        if p.stem in kit
    ]
    assert strays == []
    assert {"app", "conversation_tests", "replay", "doubles"} <= {
        p.stem for p in (ROOT / "devkit").glob("*.py")
    }
    for name in frontdesk.devkit.doubles.__all__:
        assert getattr(frontdesk.testing, name) is getattr(frontdesk.devkit.doubles, name)


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


# What a migration may import from the project: its own frozen helpers, and the error tree
# (public types, so a migration that cannot run raises the error the CLI explains).
MIGRATION_IMPORTS = ("frontdesk.migrations", "frontdesk.errors")


def _migration_imports_of_live_code(base: Path) -> dict[str, list[str]]:
    """Each migration file (and frozen helper) under `base` that imports project code other
    than `MIGRATION_IMPORTS`, with what it imports."""
    wrong = {}
    for path in sorted(base.rglob("*.py")):
        live = {
            m
            for m in _imports(path)
            if _layer(m) is not None
            and not any(m == ok or m.startswith(ok + ".") for ok in MIGRATION_IMPORTS)
        }
        if live:
            wrong[str(path.relative_to(base))] = sorted(live)
    return wrong


def test_migrations_import_no_live_code() -> None:
    """A migration is history: changing the audit or the threads code must not change what
    an old revision does, so what it needs is copied into it (`0020_audit_narrow` holds
    its own codec of the stored forms; `0014` and `0017` convert the log with
    `migrations/_frozen_audit`, a copy of the audit code as they were written). No
    exceptions."""
    migrations = ROOT / "frontdesk" / "migrations"
    assert _migration_imports_of_live_code(migrations) == {}
    frozen = {m for p in migrations.rglob("0014_*.py") for m in _imports(p)}
    assert "frontdesk.migrations._frozen_audit.repack" in frozen  # The check sees them.


def test_the_live_code_check_sees_a_migration_importing_a_room(tmp_path: Path) -> None:
    """Not vacuous: a revision importing `audit`, `threads` or the package root is caught."""
    (tmp_path / "versions").mkdir()
    (tmp_path / "versions" / "0099_x.py").write_text(
        "from frontdesk.audit import crypto\nimport frontdesk.threads.store\n"
        "from frontdesk.db import create_engine\nfrom frontdesk.errors import StoreError\n"
        "from frontdesk.migrations._frozen_audit import blobs\nimport sqlalchemy\n",
        encoding="utf-8",
    )
    assert _migration_imports_of_live_code(tmp_path) == {
        "versions/0099_x.py": ["frontdesk.audit", "frontdesk.db", "frontdesk.threads.store"]
    }


def test_errors_are_imported_from_the_one_tree() -> None:
    """`frontdesk.errors` is the one import path for errors; the folders' `errors` modules
    only re-export it for code written against them, and no module of ours uses them."""
    rooms = {f"frontdesk.{folder}.errors" for folder in FOLDERS}
    tracked = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    users = {path for path in tracked if rooms & set(_imports(ROOT / path))}
    assert users == {"tests/test_migrations.py"}  # It checks the re-export is the same class.
