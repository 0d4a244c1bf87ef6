"""Token counting: a fast local estimate, calibrated per model from what providers report.

Budgets and the compaction threshold are decided before a request is built, so counting
must be local and cheap (no network, no tokenizer download). An estimate that
under-counts makes compaction fire too late and a request overflow its budget, so every
counter here errs on the side of over-counting; `CalibratedCounter` learns, per model,
the ratio between the estimate and the exact input tokens each provider reports.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from frontdesk.errors import ConfigError

MESSAGE_OVERHEAD = 4
"""Tokens charged per message for its role and framing (providers add 3 to 5)."""

_TOKENS = re.compile(r"[A-Za-z]{1,4}|[0-9]{1,3}|\s{8}|[^\sA-Za-z0-9]")
"""One match per estimated token (`_estimate`): a letter run matches once per 4 letters
(the last part shorter), a digit run once per 3 digits, a whitespace run once per 8
whitespace characters (a shorter rest not at all), anything else once per character."""


@runtime_checkable
class TokenCounter(Protocol):
    """Anything that can tell how many input tokens a text or a list of messages costs."""

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        ...

    def count_messages(self, messages: Iterable[Mapping[str, object]]) -> int:
        """Tokens in `messages` (each with `role` and `content`), framing included."""
        ...


# Each turn counts the same thread texts again (per expert, per budget check); a bounded
# cache makes a repeat count a dictionary lookup.
@functools.lru_cache(maxsize=65_536)
def _estimate(text: str) -> int:
    """Word- and punctuation-aware estimate, close to BPE tokenizers but never far under.

    A letter run costs one token per 4 letters (rounded up), a digit run one per 3 digits
    (tokenizers split numbers into short groups), each punctuation mark or symbol one, and
    each non-ASCII character one (CJK, emoji and accents tokenize poorly). Whitespace
    rides with the next word, except for long runs.
    """
    # Counted by the expression's matches, in C: a turn's new message is counted at once
    # (a loop over its pieces in Python cost 1 % of a turn).
    return _TOKENS.subn("", text)[1]


class EstimatingCounter:
    """The default counter: a local estimate (roughly characters / 4, word-aware)."""

    def count(self, text: str) -> int:
        """Estimated tokens in `text`."""
        return _estimate(text)

    def count_messages(self, messages: Iterable[Mapping[str, object]]) -> int:
        """Estimated tokens in `messages`, plus `MESSAGE_OVERHEAD` for each."""
        return sum(MESSAGE_OVERHEAD + _estimate(str(m["content"])) for m in messages)

    def count_groups(self, groups: Sequence[Sequence[Mapping[str, object]]]) -> list[int]:
        """`count_messages` of each group of messages."""
        return _estimate_groups([[str(m["content"]) for m in group] for group in groups])

    def count_text_groups(self, groups: Sequence[Sequence[str]]) -> list[int]:
        """`count_groups` of groups of message texts (the estimate reads no role)."""
        return _estimate_groups(groups)


def _estimate_groups(groups: Iterable[Sequence[str]]) -> list[int]:
    """`EstimatingCounter.count_messages` of each group of message texts (it reads no role);
    for `TextGroups`, made once and kept (a copy each time: a caller may pop from it)."""
    if isinstance(groups, TextGroups):
        if groups.estimate is None:
            groups.estimate = _estimate_each(groups)
        return list(groups.estimate)
    return _estimate_each(groups)


def _estimate_each(groups: Iterable[Sequence[str]]) -> list[int]:
    return [len(group) * MESSAGE_OVERHEAD + sum(map(_estimate, group)) for group in groups]


class TextGroups(list[Sequence[str]]):
    """Groups of message texts that several counters count (a turn's thread, fitted to
    each expert's budget): their local estimate is made once, by the first count, and each
    built-in counter scales it by its own ratio, read when it counts. The groups must not
    change once counted."""

    __slots__ = ("estimate",)

    def __init__(self, groups: Iterable[Sequence[str]]) -> None:
        super().__init__(groups)
        self.estimate: list[int] | None = None


@dataclass
class _Ratio:
    value: float
    observations: int = 0


@dataclass
class CalibratedCounter:
    """Scales a base estimate by a per-model ratio learnt from exact provider counts.

    The ratio rises at once to any observation above it and falls only slowly
    (`decay` of the gap per observation), so a model whose tokenizer is denser than the
    estimate is over-counted rather than under-counted. Use `for_model` to get a
    `TokenCounter` bound to one model.

    Args:
        base: The estimate to scale; `EstimatingCounter` by default.
        margin: Extra fraction added on top of the learnt ratio (0.05 = 5 %).
        decay: How far the ratio moves towards a lower observation (0 to 1).
    """

    base: TokenCounter = field(default_factory=EstimatingCounter)
    margin: float = 0.05
    decay: float = 0.1
    _ratios: dict[str, _Ratio] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0 <= self.margin < 1:
            raise ConfigError(f"CalibratedCounter margin must be in [0, 1), got {self.margin}")
        if not 0 < self.decay <= 1:
            raise ConfigError(f"CalibratedCounter decay must be in (0, 1], got {self.decay}")

    def observe(self, model: str, estimated: int, exact: int) -> None:
        """Learn from one call: our `estimated` input tokens against the provider's `exact`.

        Calls with no estimate or no exact figure (a test double, a failed call) teach
        nothing and are ignored.
        """
        if estimated <= 0 or exact <= 0:
            return
        seen = exact / estimated
        with self._lock:
            ratio = self._ratios.get(model)
            if ratio is None:
                self._ratios[model] = _Ratio(seen, 1)
                return
            if seen >= ratio.value:
                ratio.value = seen
            else:
                ratio.value -= (ratio.value - seen) * self.decay
            ratio.observations += 1

    def ratio(self, model: str) -> float:
        """The factor applied to the base estimate for `model` (margin included)."""
        with self._lock:
            ratio = self._ratios.get(model)
            learnt = ratio.value if ratio is not None else 1.0
        return learnt * (1 + self.margin)

    def observations(self, model: str) -> int:
        """How many calls of `model` the ratio was learnt from."""
        with self._lock:
            ratio = self._ratios.get(model)
            return ratio.observations if ratio is not None else 0

    def count(self, text: str, *, model: str = "") -> int:
        """Calibrated tokens in `text` for `model`."""
        return _ceil(self.base.count(text) * self.ratio(model))

    def count_each(self, texts: Sequence[str], *, model: str = "") -> list[int]:
        """`count` of each of `texts`, the ratio looked up once (a turn's ranked facts and
        passages are counted for each expert)."""
        ratio, base = self.ratio(model), self.base.count
        return [_ceil(base(text) * ratio) for text in texts]

    def count_messages(self, messages: Iterable[Mapping[str, object]], *, model: str = "") -> int:
        """Calibrated tokens in `messages` for `model`."""
        return _ceil(self.base.count_messages(messages) * self.ratio(model))

    def count_groups(
        self, groups: Sequence[Sequence[Mapping[str, object]]], *, model: str = ""
    ) -> list[int]:
        """`count_messages` of each group of messages, the ratio looked up once (a budget
        counts a turn's question, summary and every exchange, for each expert)."""
        if type(self.base) is EstimatingCounter:  # It reads only the texts.
            texts = [[str(m["content"]) for m in group] for group in groups]
            return _scaled(_estimate_groups(texts), self.ratio(model))
        ratio = self.ratio(model)
        return [_ceil(self.base.count_messages(group) * ratio) for group in groups]

    def count_text_groups(
        self, groups: Sequence[Sequence[str]], *, model: str = ""
    ) -> list[int] | None:
        """`count_groups` of groups of message texts when the base estimate reads nothing
        else of a message (the default one), without framing each text as a message (a
        budget counts every exchange of the thread for each expert); `None` for a base
        that may read the roles too."""
        if type(self.base) is not EstimatingCounter:
            return None
        return _scaled(_estimate_groups(groups), self.ratio(model))

    def for_model(self, model: str) -> TokenCounter:
        """A `TokenCounter` that always counts for `model` (and follows later calibration)."""
        return _BoundCounter(self, model)


def _ceil(value: float) -> int:
    """Round up, ignoring float noise (100 * 1.1 is 110, not 111): `ceil(round(value, 6))`.

    `round` to 6 places formats the float (some thousand instructions, and a budget rounds
    each exchange for each expert), so it is asked only when it can matter: a value more
    than a millionth above a whole number rounds to more than it, hence up to the next."""
    whole = math.floor(value)
    above = value - whole  # Exact for a float.
    if above == 0:
        return whole
    if above > _NOISE:
        return whole + 1
    return math.ceil(round(value, 6))


_NOISE = 1e-6


def _scaled(counts: Iterable[int], ratio: float) -> list[int]:
    """`_ceil(n * ratio)` of each of `counts` (the ratio looked up once)."""
    return [_ceil(n * ratio) for n in counts]


@dataclass(frozen=True)
class _BoundCounter:
    owner: CalibratedCounter
    model: str

    def count(self, text: str) -> int:
        return self.owner.count(text, model=self.model)

    def count_each(self, texts: Sequence[str]) -> list[int]:
        return self.owner.count_each(texts, model=self.model)

    def count_messages(self, messages: Iterable[Mapping[str, object]]) -> int:
        return self.owner.count_messages(messages, model=self.model)

    def count_groups(self, groups: Sequence[Sequence[Mapping[str, object]]]) -> list[int]:
        return self.owner.count_groups(groups, model=self.model)

    def count_text_groups(self, groups: Sequence[Sequence[str]]) -> list[int] | None:
        return self.owner.count_text_groups(groups, model=self.model)


def count_groups(
    counter: TokenCounter, groups: Sequence[Sequence[Mapping[str, object]]]
) -> list[int]:
    """`counter.count_messages` of each group of messages: in one call when the counter
    has `count_groups` (the calibrated counters do), one group at a time for any other."""
    each = getattr(counter, "count_groups", None)
    if each is not None:
        return list(each(groups))
    return [counter.count_messages(group) for group in groups]


def count_text_groups(counter: TokenCounter, groups: Sequence[Sequence[str]]) -> list[int] | None:
    """`count_groups` of groups of message texts, each of whose messages a counter that
    reads only the texts counts without their roles (the built-in ones); `None` for any
    other counter (the caller counts the groups as messages)."""
    each = getattr(counter, "count_text_groups", None)
    return None if each is None else each(groups)


def count_each(counter: TokenCounter, texts: Sequence[str]) -> list[int]:
    """`counter.count` of each of `texts`: in one call when the counter has `count_each`
    (the calibrated counters do), one text at a time for any other `TokenCounter`."""
    each = getattr(counter, "count_each", None)
    if each is not None:
        return list(each(texts))
    return [counter.count(text) for text in texts]
