"""What a triage prompt shows when every category's examples do not fit its allowance.

A business with a handful of categories sends them all, every turn (one prompt, rendered
once: the provider's prompt cache keeps hitting). A bank with 77 intents and 10 examples
each cannot: that prompt is 18k tokens. Then each message gets its own prompt, built to fit
the triage system allowance:
- with an `EmbeddingRouter` that did not route the message, the router's top candidates
  only, with their descriptions and examples (dynamic few-shot);
- without one, every category's description, and the examples nearest the message
  (lexical similarity, rarer words weighing more) for as long as they fit; never all.

The output type follows the prompt: the categories shown (a candidate list's enum holds
the candidates and the built-ins, so the model cannot answer a category it was not shown).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from frontdesk.errors import ConfigError
from frontdesk.experts.category import Category
from frontdesk.experts.triage import (
    BUILTIN_DESCRIPTIONS,
    Described,
    TriageDecision,
    output_type_of,
)
from frontdesk.prompts import Prompt, RenderedPrompt

__all__ = ["TriageShortlist"]

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an and are be can do for from how i in is it me my of on or the to was what when"
    " where which why will with you your".split()
)


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP)


@dataclass(frozen=True, kw_only=True)
class _Example:
    category: int
    text: str
    words: frozenset[str]
    tokens: int
    """What the example adds to the rendered prompt (its quotes and separator too)."""


@dataclass(kw_only=True, eq=False)
class TriageShortlist:
    """Builds the triage prompt and output type of one message from a selection.

    Args:
        prompt: The triage prompt's template (rendered with `categories`).
        categories: Every category of the business.
        allowance: The triage system allowance, in tokens.
        count: The token counter of the triage model.

    Raises:
        ConfigError: the categories' descriptions alone are over the allowance.
    """

    prompt: Prompt
    categories: Sequence[Category]
    allowance: int
    count: Callable[[str], int]
    whole_fits: bool = field(init=False)
    """The prompt with every example fits: sent whole, rendered once (no per-message work)."""

    def __post_init__(self) -> None:
        entries = [(c.name, c.description, tuple(c.examples)) for c in self.categories]
        self._entries = entries
        self._builtins: Described = tuple(
            (name, desc, examples) for name, (desc, examples) in BUILTIN_DESCRIPTIONS.items()
        )
        self._position = {name: i for i, (name, _, _) in enumerate(entries)}
        whole = self._render(tuple(entries))
        self.whole_fits = self.count(whole.text) <= self.allowance
        examples = [
            _Example(
                category=i,
                text=text,
                words=_words(text),
                tokens=self.count(f'"{text}"; '),
            )
            for i, (_, _, texts) in enumerate(entries)
            for text in texts
        ]
        self._examples = examples
        seen = Counter(w for e in examples for w in e.words)
        self._idf = {w: math.log(1 + len(examples) / n) for w, n in seen.items()}
        if not self.whole_fits:
            bare = self.count(self._render(tuple((n, d, ()) for n, d, _ in entries)).text)
            if bare > self.allowance:
                raise ConfigError(
                    f"the triage prompt with only the {len(entries)} categories' descriptions"
                    f" is {bare:,} tokens, over its {self.allowance:,}-token allowance; shorten"
                    " the descriptions, give triage a larger Budget(system=...), or route with"
                    " an EmbeddingRouter (its candidates only are shown)"
                )
            self._bare = bare

    def _render(self, shown: Described) -> RenderedPrompt:
        listed = [
            {"name": name, "description": desc, "examples": list(examples)}
            for name, desc, examples in (*shown, *self._builtins)
        ]
        return self.prompt.render(categories=listed)

    def output_type(self, shown: Described) -> type[TriageDecision]:
        """The output type of the categories `shown` (and the built-ins)."""
        return output_type_of((*shown, *self._builtins))

    def for_message(self, text: str) -> tuple[RenderedPrompt, Described] | None:
        """Every description, and the examples nearest `text` that fit; `None` when the
        whole prompt fits (it is sent as it is)."""
        if self.whole_fits:
            return None
        return _cached(self, text, ())

    def for_candidates(self, names: Sequence[str], text: str) -> tuple[RenderedPrompt, Described]:
        """Only the categories `names` (a router's candidates, best first), with as many of
        their examples as fit (the nearest to `text` first)."""
        return _cached(self, text, tuple(n for n in names if n in self._position))

    def _select(self, text: str, names: tuple[str, ...]) -> tuple[RenderedPrompt, Described]:
        words = _words(text)
        if names:
            ranked = [self._position[n] for n in names]
            # Shown in the business's order: one prompt (and output type) per candidate set.
            order = sorted(ranked)
            base = self._render(
                tuple((self._entries[i][0], self._entries[i][1], ()) for i in order)
            )
            room = self.allowance - self.count(base.text)
            pool = [e for e in self._examples if e.category in set(order)]
            # The best candidates' examples first, nearest first within each.
            rank = {c: r for r, c in enumerate(ranked)}
            pool.sort(key=lambda e: (rank[e.category], -self._score(words, e)))
        else:
            order = list(range(len(self._entries)))
            room = self.allowance - self._bare
            pool = [e for e in self._examples if words & e.words]
            pool.sort(key=lambda e: -self._score(words, e))
        kept: set[str] = set()
        used = 0
        for example in pool:
            if used + example.tokens > room:
                continue
            kept.add(example.text)
            used += example.tokens
        # Each category's kept examples in its own order (the same selection, the same prompt).
        shown = tuple(
            (name, desc, tuple(e for e in examples if e in kept))
            for name, desc, examples in (self._entries[i] for i in order)
        )
        rendered = self._render(shown)
        while self.count(rendered.text) > self.allowance:  # The estimate per example was low.
            shown = _without_last_example(shown)
            rendered = self._render(shown)
        return rendered, shown

    def _score(self, words: frozenset[str], example: _Example) -> float:
        shared = words & example.words
        if not shared:
            return 0.0
        weight = sum(self._idf[w] for w in shared)
        return weight / math.sqrt(len(example.words))


@lru_cache(maxsize=512)
def _cached(
    shortlist: TriageShortlist, text: str, names: tuple[str, ...]
) -> tuple[RenderedPrompt, Described]:
    return shortlist._select(text, names)


def _without_last_example(shown: Described) -> Described:
    """`shown` less the last example of the last category that still has one."""
    for i in range(len(shown) - 1, -1, -1):
        name, desc, examples = shown[i]
        if examples:
            return (*shown[:i], (name, desc, examples[:-1]), *shown[i + 1 :])
    raise AssertionError("descriptions alone were checked to fit at construction")
