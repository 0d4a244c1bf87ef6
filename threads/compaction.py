"""Compaction policy: when a path's thread is summarised, and which turns the summary replaces.

Compaction evicts older whole exchanges in BLOCKS: nothing happens until the unsummarised
turns pass a threshold, then everything but the last few exchanges goes at once. Between
two compactions the thread only grows at its end, so the prefix sent to each expert
(system prompt, summary, older turns) stays byte-identical from turn to turn and provider
prompt caching hits. A window that drops one turn per turn would defeat it.

This module decides; `orchestrator._compaction` runs the summariser and
`threads.summaries` stores the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic

from frontdesk.errors import ConfigError
from frontdesk.threads.budget import T, exchanges
from frontdesk.threads.tokens import TokenCounter


@dataclass(frozen=True, kw_only=True)
class CompactionPolicy:
    """When to compact and how much to keep.

    Args:
        threshold: Tokens of unsummarised turns (the summary excluded) above which the
            thread is compacted.
        keep_exchanges: Whole exchanges kept verbatim after a compaction (the newest).
    """

    threshold: int = 1_500
    keep_exchanges: int = 2

    def __post_init__(self) -> None:
        if self.threshold < 1:
            raise ConfigError(f"CompactionPolicy threshold must be >= 1, got {self.threshold}")
        if self.keep_exchanges < 1:
            raise ConfigError(
                f"CompactionPolicy keep_exchanges must be >= 1, got {self.keep_exchanges}"
            )

    def plan(
        self, turns: Sequence[T], counter: TokenCounter, *, force: bool = False
    ) -> CompactionPlan[T] | None:
        """The turns to summarise now, or `None` while the thread is under its threshold.

        Args:
            turns: The path after the newest summary's cut point, oldest first.
            counter: Counts tokens.
            force: Ignore the threshold (`frontdesk thread compact`); the last
                `keep_exchanges` are still kept.
        """
        tokens = counter.count_messages({"role": t.role, "content": t.content} for t in turns)
        if tokens <= self.threshold and not force:
            return None
        groups = exchanges(turns)
        if len(groups) <= self.keep_exchanges:
            return None
        evicted = [turn for group in groups[: -self.keep_exchanges] for turn in group]
        return CompactionPlan(evicted=evicted, kept=list(turns[len(evicted) :]), tokens=tokens)


@dataclass(frozen=True, kw_only=True)
class CompactionPlan(Generic[T]):
    """What one compaction summarises: whole exchanges, the oldest first."""

    evicted: list[T]
    """The turns the new summary covers (with the previous summary); the last of them is
    the summary's cut point."""
    kept: list[T]
    """The turns that stay verbatim after the summary."""
    tokens: int
    """Tokens of the unsummarised turns that triggered the compaction."""
