"""Run every benchmark module (`benchmarks/*.py` with a `main()`), in name order."""

from __future__ import annotations

import importlib
import pkgutil

import benchmarks


def main() -> None:
    """Import each benchmark module and call its `main()`."""
    for info in sorted(pkgutil.iter_modules(benchmarks.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"benchmarks.{info.name}")
        run = getattr(module, "main", None)
        if callable(run):
            print(f"== benchmarks.{info.name}")
            run()


if __name__ == "__main__":
    main()
