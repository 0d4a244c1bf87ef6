"""Several requests in one message, and "which do you mean?".

Triage may return up to three categories in order (`Reply.categories`). With
`multi_intent="sequential"` (the default) the turn extracts and handles each in turn, each
with its own outcome and idempotency key, and the response expert writes one reply from
every step's instruction (`combined`); a step that needs more information stops the
sequence there and becomes the request in progress (`orchestrator/pending.py`). Each
step's outcome is stored before the next handler runs, so a retry of a turn that failed
between two of them runs only the steps not stored (`flows.unfinished`). With
`multi_intent="ask"` the reply asks which first, and the answer orders them.

When two categories fit and the thread cannot decide, triage answers `Clarify`: the reply
asks the customer to choose (`Reply.clarify`), naming the categories by their descriptions
(customer words, not names). The answer is matched to a candidate by rule (`chosen`: an
ordinal, or the words it shares with a candidate's name, description and examples), so it
routes without another triage call; an answer that matches none is triaged as usual.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from frontdesk.experts import Category, Outcome
from frontdesk.experts.category import HUMAN

MultiIntent = Literal["sequential", "ask"]
MODES: tuple[str, ...] = ("sequential", "ask")

_ORDINALS = {
    "first": 0, "1": 0, "one": 0, "the first": 0, "the first one": 0, "first one": 0,
    "second": 1, "2": 1, "two": 1, "the second": 1, "the second one": 1, "second one": 1,
    "third": 2, "3": 2, "three": 2, "the third": 2, "the third one": 2, "third one": 2,
}  # fmt: skip
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOP = {
    "a", "an", "the", "my", "i", "to", "of", "and", "or", "please", "want", "would", "like",
    "it", "is", "for", "in", "on", "me", "you", "your", "that", "this", "one", "do", "can",
}  # fmt: skip


def check_mode(mode: object) -> None:
    """`ConfigError` unless `mode` is "sequential" or "ask"."""
    from frontdesk.errors import ConfigError

    if mode not in MODES:
        raise ConfigError(f"multi_intent must be 'sequential' or 'ask', not {mode!r}")


def handled(categories: Sequence[str], registered: Mapping[str, Category]) -> tuple[str, ...]:
    """The categories of a message that the turn takes in turn: a person asked for wins
    alone (`HUMAN`); `OTHER` beside real requests is dropped (small talk around them)."""
    names = tuple(dict.fromkeys(categories))
    if HUMAN in names:
        return (HUMAN,)
    real = tuple(n for n in names if n in registered)
    return real or names[:1]


def what(category: str, registered: Mapping[str, Category]) -> str:
    """A category in customer words: its description."""
    spec = registered.get(category)
    if spec is None:
        return category.replace("_", " ").lower()
    return spec.description.rstrip(".")


def ask_which(categories: Sequence[str], registered: Mapping[str, Category]) -> Outcome:
    """The outcome of a turn that asks which of the customer's requests to take first."""
    listed = "; ".join(f"{i + 1}. {what(c, registered)}" for i, c in enumerate(categories))
    return Outcome(
        instruction=(
            "The customer asked for several things in one message. Nothing has been done"
            f" yet. Ask which they want first, listing them: {listed}."
        )
    )


def clarify(candidates: Sequence[str], registered: Mapping[str, Category]) -> Outcome:
    """The outcome of a turn whose message fits two categories: ask which one."""
    listed = "; ".join(f"{i + 1}. {what(c, registered)}" for i, c in enumerate(candidates))
    return Outcome(
        instruction=(
            "The customer's message could mean more than one thing. Nothing has been done"
            f" yet. Ask which one they mean, offering: {listed}."
        )
    )


def chosen(text: str, candidates: Sequence[str], registered: Mapping[str, Category]) -> str | None:
    """The candidate the customer's answer picks, by rule: an ordinal ("the second"), or
    the one candidate sharing the most words with it; `None` when none or a tie."""
    said = " ".join(_WORD.findall(text.casefold()))
    if said in _ORDINALS and _ORDINALS[said] < len(candidates):
        return candidates[_ORDINALS[said]]
    words = {w for w in _WORD.findall(text.casefold()) if w not in _STOP}
    if not words:
        return None
    scores = []
    for name in candidates:
        spec = registered.get(name)
        about = name.replace("_", " ")
        if spec is not None:
            about += " " + spec.description + " " + " ".join(spec.examples)
        vocabulary = {w for w in _WORD.findall(about.casefold()) if w not in _STOP}
        scores.append((len(words & vocabulary), name))
    scores.sort(reverse=True)
    best, name = scores[0]
    if best == 0 or (len(scores) > 1 and scores[1][0] == best):
        return None
    return name


def ordered(first: str, categories: Sequence[str]) -> tuple[str, ...]:
    """`categories` with the customer's choice first."""
    return (first, *(c for c in categories if c != first))


def combined(steps: Sequence[tuple[str, Outcome]], registered: Mapping[str, Category]) -> str:
    """One instruction covering every step's (the response expert writes one reply)."""
    parts = [
        f"{i + 1}. About {what(c, registered)}: {o.instruction}" for i, (c, o) in enumerate(steps)
    ]
    return (
        "The customer asked for several things in one message; cover each of these, in"
        " this order, in one reply:\n" + "\n".join(parts)
    )


def step_json(
    category: str,
    request: Any,
    need_more_info: Any,
    outcome: Outcome,
    *,
    handler_ran: bool,
    handler_failed: bool,
    idempotency_key: str,
) -> dict[str, Any]:
    """One step after the first as `TurnOutcome.flow["steps"]` keeps it."""
    return {
        "category": category,
        "request": request,
        "need_more_info": need_more_info,
        "instruction": outcome.instruction,
        "data": outcome.data,
        "handler_ran": handler_ran,
        "handler_failed": handler_failed,
        "idempotency_key": idempotency_key,
    }
