"""Citations: which of the passages it was sent the response expert's reply relies on.

The passages go to the response expert numbered (`[1] [help/fees.md - Early termination]`,
`orchestrator.knowledge.block`), with one line asking it to cite the ones it uses by their
number in square brackets, footnote style: "The fee is £12 [1]." The markers are read out
of the reply and never shown: `Cited` takes them out of the text as it streams (each
character is looked at once, so the pieces it hands on, joined, are exactly the text
`strip_citations` makes of the whole answer), and the numbers are what the reply cites.
The orchestrator checks them against the passages actually sent (`orchestrator.knowledge.
cited`): a number no passage was sent under is dropped, and audited.

A marker is `[n]` or `[n, m, ...]` (numbers of up to three digits); the spaces before it go
with it ("£12 [1]." reads "£12."). Only a request that carried passages is read for
markers: any other reply is left exactly as the model wrote it.
"""

from __future__ import annotations

import re

from frontdesk.experts.providers.base import OnDelta

__all__ = ["CITE_NOTE", "Cited", "strip_citations"]

CITE_NOTE = (
    "Cite each passage your reply uses by its number in square brackets after the sentence"
    " that uses it, e.g. [1]; cite none you did not use."
)
"""The line after the passages' label that asks the response expert for its citations."""

_MARKER = re.compile(r"\[(\d{1,3}(?:\s*,\s*\d{1,3})*)\]")
_PREFIX = re.compile(r"\[(\d{1,3}(\s*,\s*(\d{1,3})?)*)?")
_LONGEST = 32
"""A held `[` that runs longer than this without closing is plain text."""
_SPACE = " \t"


class Cited:
    """Takes the citation markers out of a reply's text, piece by piece.

    `feed` returns the text that can be handed on now (a `[` that may open a marker, and
    the spaces before it, are held until it is clear); `finish` returns what is held at
    the end. `refs` are the numbers cited, in the order first cited.
    """

    def __init__(self) -> None:
        self.refs: list[str] = []
        self._spaces = ""
        self._marker = ""

    def feed(self, text: str) -> str:
        """The part of `text` (after what came before) that is plain reply text."""
        out: list[str] = []
        for char in text:
            self._char(char, out)
        return "".join(out)

    def finish(self) -> str:
        """What is still held: an unclosed `[...` is text after all."""
        out, self._spaces, self._marker = self._spaces + self._marker, "", ""
        return out

    def _char(self, char: str, out: list[str]) -> None:
        if self._marker:
            held = self._marker + char
            if char == "]" and _MARKER.fullmatch(held):
                for ref in held[1:-1].split(","):
                    if ref.strip() not in self.refs:
                        self.refs.append(ref.strip())
                self._marker, self._spaces = "", ""  # The spaces before go with it.
                return
            if len(held) <= _LONGEST and _PREFIX.fullmatch(held):
                self._marker = held
                return
            # Not a marker: what was held is text; `char` starts afresh.
            out.append(self._spaces + self._marker)
            self._spaces, self._marker = "", ""
        if char in _SPACE:
            self._spaces += char
        elif char == "[":
            self._marker = char
        else:
            out.append(self._spaces + char)
            self._spaces = ""


def strip_citations(text: str) -> tuple[str, list[str]]:
    """`text` without its markers, and the numbers they cite (first cited first)."""
    cited = Cited()
    clean = cited.feed(text) + cited.finish()
    return clean, cited.refs


class CitedDeltas:
    """An `OnDelta` that hands on each piece without its citation markers (`Cited`)."""

    def __init__(self, on_delta: OnDelta) -> None:
        self._on_delta = on_delta
        self.cited = Cited()

    async def __call__(self, text: str) -> None:
        out = self.cited.feed(text)
        if out:
            await self._on_delta(out)

    async def finish(self) -> None:
        """Hand on what was held at the end of the stream."""
        out = self.cited.finish()
        if out:
            await self._on_delta(out)
