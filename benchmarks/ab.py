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
(../shared/peerbench) runs first in every round (then BASE and the work tree, each
first in every other round), and issue 20's and 47's goals
(`benchmarks.turns.GOALS`) are checked for BASE and here against the peers of the same
round: this machine's speed swings by a third within twenty minutes, and a ratio between
figures measured minutes apart moves far less than one between figures measured a
quarter of an hour apart. The table gives the median ratio of the rounds and in how many
the work tree met each goal, then each round's turn-10 ratios.

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
from dataclasses import dataclass
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


def sides_of_round(i: int) -> tuple[str, str]:
    """The order the two sides run in round `i` (from 0): BASE first, then the work tree
    first, alternately."""
    return ("base", "here") if i % 2 == 0 else ("here", "base")


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


GOAL_ROWS = [
    ("t10", "turn 10 / best peer's"),
    ("memory", "turn 10 with memory / best peer's"),
    ("concurrent", "200x5 / best peer's"),
    ("flat", "turn 1000 / turn 10"),
]
BACKENDS = [("sqlite", "SQLite", None), ("postgresql", "PostgreSQL", "postgres")]


@dataclass(frozen=True)
class Round:
    """One round of `--with-peers`: the peers, then BASE and the work tree (in the order
    `sides_of_round` gives), back to back, so each side's ratio to the best peer is taken
    against peers measured minutes away."""

    peers: dict[str, Any]
    then: dict[str, Any]
    now: dict[str, Any]

    def ratios(self, backend: str, key: str | None) -> dict[str, Any] | None:
        """Each goal at BASE and here in this round, or None if the backend was not run."""
        sides = (
            [self.then, self.now]
            if key is None
            else [self.then.get(key, {}), self.now.get(key, {})]
        )
        if not all("long" in side and "concurrent" in side for side in sides):
            return None
        before, after = (goals(side, self.peers, backend) for side in sides)
        return {"then": before, "now": after}


def _ratio(values: list[float | None]) -> str:
    found = [v for v in values if v is not None]
    return "-" if not found else f"{statistics.median(found):.2f}x"


def goals_table(base: str, rounds: list[Round]) -> str:
    """Issue 20's and 47's goals, each round's ratio taken against that round's peers: the
    median ratio at BASE and here, and in how many rounds the work tree met the goal."""
    rows = [f"| backend | goal | {base} | work tree | met here |", "|---|---|---|---|---|"]
    for backend, label, key in BACKENDS:
        found = [r for r in (rnd.ratios(backend, key) for rnd in rounds) if r is not None]
        if not found:
            continue
        for name, text in GOAL_ROWS:
            if not all(name in r["then"] and name in r["now"] for r in found):
                continue  # A goal is shown before and after, or not at all.
            if all(r["now"][name]["ratio"] is None for r in found):
                continue  # Not measured (turn 1000 in a run of fewer turns).
            met = sum(r["now"][name]["met"] for r in found)
            rows.append(
                f"| {label} | {text} {found[0]['now'][name]['goal']} "
                f"| {_ratio([r['then'][name]['ratio'] for r in found])} "
                f"| {_ratio([r['now'][name]['ratio'] for r in found])} "
                f"| {met} of {len(found)} |"
            )
    return "\n".join(rows)


def rounds_table(base: str, rounds: list[Round]) -> str:
    """Round by round: the best peer's turn 10 and each turn-10 ratio, BASE -> here."""
    columns: list[tuple[str, str | None, str, str]] = [
        ("sqlite", None, "t10", "SQLite"),
        ("sqlite", None, "memory", "memory on"),
        ("postgresql", "postgres", "t10", "PostgreSQL"),
    ]
    head = [f"{text} / peer, {base} -> here" for *_, text in columns]
    rows = ["| round | best peer turn 10 | " + " | ".join(head) + " |"]
    rows.append("|---|---|" + "---|" * len(columns))
    for i, rnd in enumerate(rounds, 1):
        first = rnd.ratios("sqlite", None)
        if first is None:
            continue
        peer = f"{first['now']['t10']['peer_ms']:.2f} ms ({first['now']['t10']['best_peer']})"
        cells = []
        for backend, key, name, _text in columns:
            r = rnd.ratios(backend, key)
            if r is None or name not in r["then"] or name not in r["now"]:
                cells.append("-")
                continue
            cells.append(f"{r['then'][name]['ratio']:.2f}x -> {r['now'][name]['ratio']:.2f}x")
        rows.append(f"| {i} | {peer} | " + " | ".join(cells) + " |")
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
        help="run the peers in every round and check the goals at both sides against them",
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
            then, now, rounds = [], [], []
            for i in range(args.rounds):  # Interleaved: the machine's noise hits both alike.
                peers = None
                if args.with_peers:  # First in each round, never beside frontdesk (two cores).
                    peers = run_peers(
                        args.peers_dir, work / f"peers-{i}", args.turns, args.convs, args.per_conv
                    )
                # BASE first in even rounds, the work tree first in odd ones: whatever the
                # run before leaves behind (PostgreSQL's checkpoint after a dropped
                # database, say) falls on each side alike.
                for side in sides_of_round(i):
                    if side == "base":
                        then.append(run_turns(tree, work / f"base-{i}.json", args))
                    else:
                        now.append(run_turns(ROOT, work / f"here-{i}.json", args))
                if peers is not None:
                    rounds.append(Round(peers, then[-1], now[-1]))
            if args.instructions:  # Deterministic: one count per side is the figure.
                then[0]["instructions"] = {"per_turn_m": per_turn(tree) / 1e6}
                now[0]["instructions"] = {"per_turn_m": per_turn(ROOT) / 1e6}
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(checkout)], cwd=ROOT, check=False
            )
    text = table(sha, then, now)
    if rounds:
        text += "\n\n" + goals_table(sha, rounds) + "\n\n" + rounds_table(sha, rounds)
    print(text)
    if args.doc is not None:
        write_doc(args.doc, text)
    return text


if __name__ == "__main__":
    compare()
