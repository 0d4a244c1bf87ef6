"""The turn benchmark at a base commit and at the work tree, interleaved: now / then.

    python -m benchmarks.ab BASE [--rounds 3] [--turns 130] [--pg] [--instructions]
                                 [--with-peers] [--doc docs/benchmarks.md]
    make bench BASE=<ref>

A turn grew four times slower over a wave of features and no one noticed, because every
figure was compared with a table measured on another day, on another machine. This runs
`benchmarks.turns` (instant fake models, no peers) once at BASE and once here, alternating,
`--rounds` times, in one run on one machine, and prints the median of each figure at
both and here / BASE. With `--doc`, the table replaces the one between the
`<!-- ab:begin -->` and `<!-- ab:end -->` marks of that file (docs/benchmarks.md keeps the
last one). With `--instructions`, each side's instructions per warm turn are counted too
(`benchmarks.instructions`, valgrind): times move with the machine's load, counts do not, so
a regression of a few percent shows there first. With `--with-peers`, the peer benchmark
(../shared/peerbench) runs once first, in the same run, and issue 20's goals
(`benchmarks.turns.GOALS`) are checked for BASE and here against it: the before and after
of every goal from one run.

BASE is checked out with `git worktree` in a temporary folder and run with this
virtualenv: a link tree maps its folders to the `frontdesk.<folder>` names the way the
wheel does (pyproject's `package-dir`), so no second install is needed. A BASE whose
dependencies differ from the work tree's needs `make install` of its own instead.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from benchmarks.instructions import per_turn
from benchmarks.turns import PEERS_DIR, goals, run_peers

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- ab:begin -->", "<!-- ab:end -->"
FIGURES = [
    # (label, path in the JSON of benchmarks.turns, higher is better)
    ("SQLite turn 10, ms", ("long", "t10_median_ms"), False),
    ("SQLite turn 100, ms", ("long", "t100_median_ms"), False),
    ("SQLite turn 1000, ms", ("long", "t1000_median_ms"), False),
    ("SQLite concurrent, turns/s", ("concurrent", "turns_per_s"), True),
    ("SQLite turn 10 with memory, ms", ("memory", "t10_median_ms"), False),
    ("PostgreSQL turn 10, ms", ("postgres", "long", "t10_median_ms"), False),
    ("PostgreSQL turn 100, ms", ("postgres", "long", "t100_median_ms"), False),
    ("PostgreSQL turn 1000, ms", ("postgres", "long", "t1000_median_ms"), False),
    ("PostgreSQL concurrent, turns/s", ("postgres", "concurrent", "turns_per_s"), True),
    ("SQLite instructions per warm turn, millions", ("instructions", "per_turn_m"), False),
]


def link_tree(base: Path, into: Path) -> Path:
    """A folder where `import frontdesk` finds BASE's code laid out as the wheel lays it."""
    config = tomllib.loads((base / "pyproject.toml").read_text())
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    top = into / "frontdesk"
    top.mkdir(parents=True)
    for item in (base / mapping.get("frontdesk", "frontdesk")).iterdir():
        (top / item.name).symlink_to(item)
    for name, folder in mapping.items():
        if name != "frontdesk":
            (top / name.removeprefix("frontdesk.")).symlink_to(base / folder)
    (into / "benchmarks").symlink_to(base / "benchmarks")
    return into


def run_turns(cwd: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run of `benchmarks.turns` in `cwd` (its figures as JSON)."""
    flags = ["--turns", str(args.turns), "--convs", str(args.convs)]
    flags += ["--per-conv", str(args.per_conv), "--no-peers", "--out", str(out)]
    if not args.pg:
        flags.append("--no-pg")
    subprocess.run(
        [sys.executable, "-m", "benchmarks.turns", *flags],
        cwd=cwd,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def pick(row: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = row
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return float(value) if isinstance(value, int | float) else None


def table(base: str, then: list[dict[str, Any]], now: list[dict[str, Any]]) -> str:
    """The Markdown table: the median of each figure at BASE and here, and now / then."""
    rows = [f"| figure | {base} | work tree | now / then |", "|---|---|---|---|"]
    for label, path, _higher in FIGURES:
        a = [v for v in (pick(r, path) for r in then) if v is not None]
        b = [v for v in (pick(r, path) for r in now) if v is not None]
        if not b:
            continue
        old = statistics.median(a) if a else None
        new = statistics.median(b)
        ratio = "-" if old is None else f"{new / old:.2f}x"
        shown = "-" if old is None else f"{old:.2f}"
        rows.append(f"| {label} | {shown} | {new:.2f} | {ratio} |")
    return "\n".join(rows)


def medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of several runs as one: the median of each number, by its path."""
    first = rows[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            found = [r[key] for r in rows if isinstance(r.get(key), dict)]
            out[key] = medians(found)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = statistics.median(r[key] for r in rows if key in r)
    return out


GOAL_ROWS = [
    ("t10", "turn 10 / best peer's"),
    ("concurrent", "200x5 / best peer's"),
    ("flat", "turn 1000 / turn 10"),
]


def goals_table(base: str, then: dict[str, Any], now: dict[str, Any], peers: Any) -> str:
    """Issue 20's goals at BASE and here (median figures) against one run of the peers."""
    rows = [f"| backend | goal | {base} | work tree | met here? |", "|---|---|---|---|---|"]
    for backend, label, key in (
        ("sqlite", "SQLite", None),
        ("postgresql", "PostgreSQL", "postgres"),
    ):
        sides = [
            then if key is None else then.get(key, {}),
            now if key is None else now.get(key, {}),
        ]
        if not all("long" in side and "concurrent" in side for side in sides):
            continue
        before, after = (goals(side, peers, backend) for side in sides)
        for name, text in GOAL_ROWS:
            old, new = before[name], after[name]

            def shown(g: dict[str, Any]) -> str:
                return "-" if g["ratio"] is None else f"{g['ratio']:.2f}x"

            met = "yes" if new["met"] else "no"
            rows.append(f"| {label} | {text} {new['goal']} | {shown(old)} | {shown(new)} | {met} |")
    return "\n".join(rows)


def write_doc(doc: Path, text: str) -> None:
    """Replace the table between the marks of `doc` (appended with the marks if absent)."""
    body = doc.read_text() if doc.exists() else ""
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in body and END in body:
        head, rest = body.split(BEGIN, 1)
        body = head + block + rest.split(END, 1)[1]
    else:
        body = body.rstrip() + "\n\n" + block + "\n"
    doc.write_text(body)


def compare(argv: list[str] | None = None) -> str:
    """Run the interleaved comparison; print and return its table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab")
    parser.add_argument("base", help="a commit, branch or tag to compare the work tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--turns", type=int, default=130)
    parser.add_argument("--convs", type=int, default=60)
    parser.add_argument("--per-conv", type=int, default=5)
    parser.add_argument("--pg", action="store_true", help="also on PostgreSQL (slower)")
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions (valgrind, slow)"
    )
    parser.add_argument(
        "--with-peers",
        action="store_true",
        help="run the peers once too and check issue 20's goals at both sides",
    )
    parser.add_argument("--peers-dir", type=Path, default=PEERS_DIR)
    parser.add_argument("--doc", type=Path, default=None, help="write the table into this file")
    args = parser.parse_args(argv)
    sha = subprocess.run(
        ["git", "rev-parse", "--short", args.base],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="frontdesk-ab-") as tmp:
        work = Path(tmp)
        checkout = work / "base"
        subprocess.run(
            ["git", "worktree", "add", "-q", "--detach", str(checkout), sha], cwd=ROOT, check=True
        )
        try:
            tree = link_tree(checkout, work / "tree")
            peers = None
            if args.with_peers:  # Once, first, never beside frontdesk (two cores).
                peers = run_peers(
                    args.peers_dir, work / "peers", args.turns, args.convs, args.per_conv
                )
            then, now = [], []
            for i in range(args.rounds):  # Interleaved: the machine's noise hits both alike.
                then.append(run_turns(tree, work / f"base-{i}.json", args))
                now.append(run_turns(ROOT, work / f"here-{i}.json", args))
            if args.instructions:  # Deterministic: one count per side is the figure.
                then[0]["instructions"] = {"per_turn_m": per_turn(tree) / 1e6}
                now[0]["instructions"] = {"per_turn_m": per_turn(ROOT) / 1e6}
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(checkout)], cwd=ROOT, check=False
            )
    text = table(sha, then, now)
    if peers is not None:
        text += "\n\n" + goals_table(sha, medians(then), medians(now), peers)
    print(text)
    if args.doc is not None:
        write_doc(args.doc, text)
    return text


if __name__ == "__main__":
    compare()
