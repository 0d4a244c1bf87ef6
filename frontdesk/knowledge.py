"""`Passage`: one retrieved piece of the business's own documents (see docs/knowledge.md).

A leaf of the package root, so that every layer can name it: the knowledge store in
`threads` returns it, the experts are sent it, `Reply.sources` cites it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_PASSAGE_CHARS", "MAX_SOURCE_CHARS", "Passage"]

MAX_SOURCE_CHARS = 2_000_000
"""Longest source text `add` takes (a help page or a policy, not a whole library)."""

MAX_PASSAGE_CHARS = 3_000
"""A section longer than this is split at its paragraphs into parts of at most about this
size, so that one long section never takes the whole `documents` allowance."""


@dataclass(frozen=True, kw_only=True)
class Passage:
    """One section of a source (a Markdown section, or a paragraph of plain text).

    Re-adding a changed source keeps the `id` of each passage (matched by its title), and
    raises the `version` of those whose text changed; `sha256` identifies the exact text.
    """

    id: str
    source: str
    """The source's name, e.g. the file path `help/fees.md`."""
    title: str
    """The section's heading (plain text: the paragraph's first words)."""
    text: str
    """The section's body, as stored."""
    version: int
    """1 when first stored, one more at each change of its text."""
    score: float = 0.0
    """How well it matched the search (higher is better; 0 outside a search)."""
    sha256: str = ""
    """The hash of the title and text (what the audit log records of a passage sent)."""
