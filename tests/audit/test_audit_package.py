"""The audit package's surface and its place in the import order."""

from __future__ import annotations

import ast
from pathlib import Path

from frontdesk import audit

AUDIT = Path(audit.__file__).parent


def test_all_is_sorted_and_importable() -> None:
    assert audit.__all__ == sorted(audit.__all__, key=lambda n: (not n.isupper(), n))
    for name in audit.__all__:
        assert hasattr(audit, name), name


def test_audit_imports_neither_experts_nor_orchestrator_nor_threads() -> None:
    for path in AUDIT.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert ".".join(name.split(".")[:2]) not in {
                    "frontdesk.experts",
                    "frontdesk.orchestrator",
                    "frontdesk.threads",
                }, f"{path.name} imports {name}"
