"""Instructions per warm turn, counted by valgrind: a figure the machine's load cannot move.

    python -m benchmarks.instructions [--low 20] [--high 80] [--pg postgresql://USER@HOST/DB]
    make bench BASE=<ref> AB_FLAGS=--instructions

On a shared 2-core machine the same code's turn time moves by a factor of two from one
run to the next, so a regression of a few percent hides in the noise of any timing. An
instruction count does not: valgrind's callgrind runs every thread of the process on its
own simulated CPU and counts what they execute, whatever else the machine is doing. One
run of `benchmarks.turn_cpu` (a conversation on SQLite, instant models) with `--low` turns
and one with `--high` turns differ by exactly the turns between them: their counts'
difference over `high - low` is the instructions of a warm turn, start-up, imports and
migrations cancelled out. Hash randomisation is pinned (`PYTHONHASHSEED=0`). Two counts of
the same commit still differed by 2 % here (22.15M and 21.69M a turn, from two checkouts):
the job runner's timed polls and the writer's group commit follow the clock, which
valgrind slows fifty times. A difference under 2 % is not a finding; one over it is.

What it does not count: the kernel's side of a system call (SQLite's writes of its WAL,
`fsync`), and waiting. A change to how much the database writes is measured in time too.

Valgrind slows the process about fifty times: the default pair of runs takes two minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from frontdesk.errors import ConfigError

_COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)


def collected(report: str) -> int:
    """The instruction count of callgrind's summary (its `Collected :` line).

    Raises:
        ValueError: `report` holds no such line (valgrind failed before the end).
    """
    found = _COLLECTED.findall(report)
    if not found:
        raise ValueError(f"no 'Collected :' line in valgrind's output: {report[-500:]!r}")
    return int(found[-1])


def count(argv: list[str], cwd: Path) -> int:
    """Instructions executed by `argv` (all its threads) under callgrind, run in `cwd`.

    Raises:
        ConfigError: valgrind is not installed.
        subprocess.CalledProcessError: the program failed.
    """
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise ConfigError("valgrind is not installed: `apt-get install valgrind` first")
    done = subprocess.run(
        [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(cwd)},
        capture_output=True,
        text=True,
        check=True,
    )
    return collected(done.stderr)


def per_turn(cwd: Path, *, low: int = 20, high: int = 80, pg: str | None = None) -> float:
    """Instructions of one warm turn of the tree in `cwd` (`benchmarks.turn_cpu` run with
    `low` and with `high` turns; the difference over `high - low`), on SQLite or, with
    `pg`, on that PostgreSQL server (this process's instructions; the server's are not
    counted)."""
    if not 0 < low < high:
        raise ConfigError(f"need 0 < low < high turns, got low={low}, high={high}")
    where = [] if pg is None else ["--pg", pg]
    turns = [sys.executable, "-m", "benchmarks.turn_cpu", *where, "--turns"]
    return (count([*turns, str(high)], cwd) - count([*turns, str(low)], cwd)) / (high - low)


def main(argv: list[str] | None = None) -> None:
    """Count this tree's instructions per warm turn and print them as JSON."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.instructions")
    parser.add_argument("--low", type=int, default=20)
    parser.add_argument("--high", type=int, default=80)
    parser.add_argument("--pg", default=None, help="a PostgreSQL URL: count a turn there")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    value = per_turn(root, low=args.low, high=args.high, pg=args.pg)
    print(json.dumps({"low": args.low, "high": args.high, "per_turn": value}))


if __name__ == "__main__":
    main()
