"""Run every benchmark module in this package: `python -m benchmarks [args passed on]`.

Each module `benchmarks/<name>.py` with a `main(argv)` function is one benchmark.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import benchmarks


def main(argv: list[str]) -> None:
    """Run each benchmark module's `main` in name order."""
    for info in sorted(pkgutil.iter_modules(benchmarks.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        if hasattr(module, "main"):
            print(f"== benchmarks.{info.name}", flush=True)
            module.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
