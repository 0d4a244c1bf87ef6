"""Where a sampled turn's time goes: shares of a py-spy profile's samples.

    py-spy record -r 1000 -f raw -o turn.txt -- \\
        python -m benchmarks.turn_cpu --turns 15 --conversations 80 --no-gc
    python -m benchmarks.profile_shares turn.txt [--root FUNCTION ...] [--top 12] [NAME ...]

py-spy's raw format has one line per distinct stack, `frame;frame;...;frame COUNT`, each
frame `function (file:line)`. Counted here are the samples whose stack passes through a
`--root` function (by default the turn, `run_turn`, and the request expert it starts as a
task of its own, `SpeculativeRequest._extract`: start-up and the closing are left out).
For each NAME, the share of them whose stack holds that function (inclusive: it and what
it calls, once per sample however deep it recurses); then the `--top` functions by self
share (the sample's innermost frame). A NAME is a function as py-spy writes it
(`AuditLog.append_sync`, `deflate`), with its file when the name alone is ambiguous
(`deflate (audit/compact.py)`).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r":\d+\)$")
ROOTS = ("run_turn", "SpeculativeRequest._extract")
"""The turn's own work: the turn, and the request expert it starts as a task beside it."""


def frame_name(frame: str) -> str:
    """A frame without its line number: `function (file)`."""
    return _LINE.sub(")", frame)


def _function(name: str) -> str:
    return name.split(" (", 1)[0]


def stacks(lines: Iterable[str]) -> Iterator[tuple[list[str], int]]:
    """The (frames, samples) of each line of py-spy's raw output, frames outermost first
    and without line numbers.

    Raises:
        ValueError: a line that is not `frames COUNT`.
    """
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            raise ValueError(f"line {number} is not py-spy's raw format (frames COUNT): {line!r}")
        if stack:  # py-spy writes the samples of a thread it found no frame in without any.
            yield [frame_name(f) for f in stack.split(";")], int(count)


@dataclass(frozen=True)
class Shares:
    """The samples under the root, and each named function's and each innermost frame's."""

    total: int
    inclusive: dict[str, int]
    innermost: Counter[str]

    def share(self, name: str) -> float:
        return self.inclusive.get(name, 0) / self.total if self.total else 0.0


def shares(
    samples: Iterable[tuple[list[str], int]], roots: Iterable[str], names: list[str]
) -> Shares:
    """The shares of `names` among the samples whose stack passes through one of `roots`;
    a name counts only from the outermost root frame down (the turn's own work)."""
    roots = frozenset(roots)
    total = 0
    inclusive = dict.fromkeys(names, 0)
    innermost: Counter[str] = Counter()
    for frames, count in samples:
        functions = [_function(f) for f in frames]
        at = next((i for i, f in enumerate(functions) if f in roots), None)
        if at is None:
            continue
        total += count
        innermost[frames[-1]] += count
        held = {*frames[at:], *functions[at:]}  # A name with its file, or the function alone.
        for name in names:
            if name in held:
                inclusive[name] += count
    return Shares(total=total, inclusive=inclusive, innermost=innermost)


def main(argv: list[str] | None = None) -> None:
    """Print the shares."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_shares")
    parser.add_argument("profile", type=Path, help="py-spy's output with -f raw")
    parser.add_argument("names", nargs="*", help="functions whose inclusive share to print")
    parser.add_argument(
        "--root", action="append", help="a function whose samples count (repeat for more)"
    )
    parser.add_argument("--top", type=int, default=12, help="innermost frames to list")
    args = parser.parse_args(argv)
    roots = args.root or list(ROOTS)
    with args.profile.open(encoding="utf-8") as lines:
        found = shares(stacks(lines), roots, args.names)
    if not found.total:
        parser.error(f"no sample passes through {' or '.join(roots)}")
    print(f"{found.total} samples under {' or '.join(roots)}")
    for name in args.names:
        print(f"{100 * found.share(name):6.1f} %  {name}")
    print("innermost frames:")
    for frame, count in found.innermost.most_common(args.top):
        print(f"{100 * count / found.total:6.1f} %  {frame}")


if __name__ == "__main__":
    main()
