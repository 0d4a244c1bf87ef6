"""The facade's size and how much of the project one warm turn walks through, at a base
commit and here.

    python -m benchmarks.architecture BASE [BASE ...]

The facade: the parameters `Orchestrator.__init__` names, its public names (the class's
methods and properties, and the public attributes an instance sets), and the lines of the
`orchestrator/` folder's Python files.

One potato-shop turn (the offline model, SQLite, default settings) is traced after a first
turn has opened everything: every Python call made in any thread while `handle` runs is
seen (`sys.setprofile` and `threading.setprofile`), and the calls into the project's own
files are counted: the distinct files, the distinct functions, and the switches from one
file to another. BASE is unpacked with `git archive` and both sides are run through the
same link tree (`benchmarks.ab.link_tree`), by this file, with this virtualenv, in one run.
These are counts, not times: the machine's load does not move them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def trace_one_turn(tree: Path, listing: bool = False) -> dict[str, int]:
    """In this process (run with `tree` first on the path): the counts of one warm turn;
    with `listing`, also print (to stderr) each file it enters and that file's functions."""
    from frontdesk.examples.potato_shop import build

    prefix = str(tree / "frontdesk")
    seen: list[tuple[str, str]] = []
    recording = False

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if recording and event == "call" and frame.f_code.co_filename.startswith(prefix):
            seen.append((frame.f_code.co_filename, frame.f_code.co_name))

    async def run(store: str) -> None:
        nonlocal recording
        orch = build(model="offline", store=store)
        try:
            await orch.handle("c", "Where is my order 77120?", user_id="u")
            await orch.drain(30)  # The first turn's background work is done.
            recording = True
            await orch.handle("c", "And when does it come?", user_id="u")
            recording = False
        finally:
            await orch.aclose()

    threading.setprofile(profile)
    sys.setprofile(profile)
    with tempfile.TemporaryDirectory() as folder:
        try:
            asyncio.run(run(f"sqlite:///{folder}/turn.db"))
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
    switches = sum(1 for a, b in zip(seen, seen[1:], strict=False) if a[0] != b[0])
    if listing:
        functions: dict[str, set[str]] = {}
        for file, function in seen:
            functions.setdefault(os.path.relpath(file, tree), set()).add(function)
        for file, names in sorted(functions.items()):
            print(f"{file} ({len(names)}): {', '.join(sorted(names))}", file=sys.stderr)
    return {
        **facade(tree),
        "files": len({file for file, _ in seen}),
        "functions": len(set(seen)),
        "file_switches": switches,
    }


def facade(tree: Path) -> dict[str, int]:
    """The size of the facade (see the module's docstring)."""
    import inspect

    from frontdesk import Orchestrator
    from frontdesk.examples.potato_shop import categories

    parameters = len(inspect.signature(Orchestrator.__init__).parameters) - 1  # not self
    instance = Orchestrator(categories(), model="offline", store="sqlite:///never-opened.db")
    names = {n for n in dir(Orchestrator) if not n.startswith("_")}
    names |= {n for n in vars(instance) if not n.startswith("_")}
    folder = tree / "frontdesk" / "orchestrator"
    lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in folder.rglob("*.py"))
    return {"init_parameters": parameters, "public_names": len(names), "orchestrator_lines": lines}


def measure(tree: Path, listing: bool = False) -> dict[str, int]:
    """`trace_one_turn` in a fresh interpreter whose `frontdesk` is `tree`'s."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--trace", str(tree)]
        + (["--list"] if listing else []),
        cwd=tree,
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        stderr=None if listing else subprocess.PIPE,
        text=True,
    ).stdout
    counts: dict[str, int] = json.loads(out.strip().splitlines()[-1])
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bases", nargs="*", help="the commits to compare with")
    parser.add_argument("--trace", type=Path, help=argparse.SUPPRESS)
    # Prints each file one warm turn enters, with its functions (to stderr).
    parser.add_argument("--list", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trace is not None:
        print(json.dumps(trace_one_turn(args.trace, args.list)))
        return
    from benchmarks.ab import link_tree

    with tempfile.TemporaryDirectory() as folder:
        rows = {}
        for i, base in enumerate(args.bases):
            source = Path(folder) / f"base-{i}"
            source.mkdir()
            archive = subprocess.run(
                ["git", "archive", base], cwd=ROOT, check=True, capture_output=True
            ).stdout
            archive_path = Path(folder) / f"base-{i}.tar"
            archive_path.write_bytes(archive)
            with tarfile.open(archive_path) as tar:
                tar.extractall(source, filter="data")
            tree = link_tree(source, Path(folder) / f"base-{i}-tree")
            if args.list:
                print(f"## {base}", file=sys.stderr)
            rows[base] = measure(tree, args.list)
        if args.list:
            print("## work tree", file=sys.stderr)
        rows["work tree"] = measure(link_tree(ROOT, Path(folder) / "tree"), args.list)
    print("| | " + " | ".join(rows) + " |")
    print("|---|" + "---|" * len(rows))
    figures = ("init_parameters", "public_names", "orchestrator_lines")
    for figure in (*figures, "files", "functions", "file_switches"):
        print(f"| {figure} | " + " | ".join(str(r[figure]) for r in rows.values()) + " |")


if __name__ == "__main__":
    main()
