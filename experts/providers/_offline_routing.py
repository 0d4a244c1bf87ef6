"""The offline stand-in's triage: BM25 nearest neighbour over each category's examples.

Every example of every category, and each category's name with its description, is a
short document; a message goes to the category of the document that BM25 scores highest
against it (Robertson and Zaragoza's Okapi weighting). When the best document shares too
little of the message's (rarer) words, the message is out of scope: `OTHER`.

Conversations are not single messages: when the assistant has just asked a question and
the user's answer carries a value (a number, an amount, a date, quoted text), or is short
and on its own points nowhere confidently, the conversation stays in the category that
asked ("It's £12 too much" in the middle of a dispute, however much it sounds like a
question about the plan).

The index is built once per triage output type (the app's categories) and kept.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from frontdesk.experts.providers.base import Message

K1 = 1.2
B = 0.75
DECAY = 0.7
OUT_OF_SCOPE = 0.2
"""Below this share of the message's IDF weight matched, the message is out of scope
(chosen on CLINC150's validation split: in-scope accuracy against out-of-scope recall)."""
CONFIDENT = 0.5
"""An answer whose own best match covers this share of its words may change the category."""

_HUMAN = re.compile(
    r"\b(?:talk|speak|chat|connect|put|transfer|get|want|need|reach|call)\b[\w\s']{0,24}?"
    r"\b(?:human|person|people|agent|representative|operator|supervisor|manager|staff)\b"
    r"|\b(?:real|live|actual)\s+(?:person|human|agent)\b"
    r"|\bget me (?:someone|somebody)\b|\b(?:someone|somebody) (?:who|to) (?:can )?help\b"
    r"|^\W*(?:human|agent|operator|representative)\W*$",
    re.IGNORECASE,
)
_VALUE = re.compile(
    r"\d|[£$€]|\b(?:today|tomorrow|yesterday|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday)\b|[\"“'‘][^\"”'’]{2,}[\"”'’]",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Route:
    """A category and how sure the match is (the share of the message's weight matched)."""

    category: str
    share: float
    words: tuple[str, ...]


@dataclass(frozen=True)
class Index:
    """BM25 statistics over the categories' documents."""

    documents: tuple[tuple[str, Counter[str], int], ...]
    """(category, term counts, length) per document."""
    idf: Mapping[str, float]
    average_length: float

    def route(self, words: Sequence[str]) -> Route | None:
        """The best category for `words`, or None when no document shares a word.

        A category scores the sum of its documents' BM25 scores, the best counted in full
        and each next one by `DECAY` less (several close examples outvote one)."""
        unique = list(dict.fromkeys(words))
        query = [w for w in unique if w in self.idf]
        if not query:
            return None
        scores: dict[str, list[tuple[float, tuple[str, ...]]]] = {}
        for category, counts, length in self.documents:
            score, shared = 0.0, []
            norm = K1 * (1 - B + B * length / self.average_length)
            for w in query:
                tf = counts.get(w, 0)
                if tf:
                    score += self.idf[w] * tf * (K1 + 1) / (tf + norm)
                    shared.append(w)
            if score > 0:
                scores.setdefault(category, []).append((score, tuple(shared)))
        if not scores:
            return None
        best, best_total = "", 0.0
        best_words: tuple[str, ...] = ()
        for category, found in scores.items():
            found.sort(key=lambda s: -s[0])
            total = sum(score * DECAY**i for i, (score, _w) in enumerate(found))
            if total > best_total:
                words = tuple(dict.fromkeys(w for _s, shared in found[:3] for w in shared))
                best, best_total, best_words = category, total, words
        unknown = _unknown_weight(len(self.documents))
        possible = sum(self.idf[w] for w in query) + unknown * (len(unique) - len(query))
        matched = sum(self.idf[w] for w in best_words)
        return Route(category=best, share=matched / possible, words=best_words)


def _unknown_weight(n: int) -> float:
    """A word no document has weighs as much as the rarest word would (it is informative)."""
    return math.log(1 + (n + 0.5) / 0.5)


def build_index(
    categories: Mapping[str, Any], names: Sequence[str], tokens: Callable[[str], list[str]]
) -> Index:
    """Index each example, and each name with its description, as a document."""
    documents = []
    for name, info in categories.items():
        if name not in names:
            continue
        texts = [name.replace("_", " ").lower() + " " + str(info.get("description", ""))]
        texts += [str(e) for e in info.get("examples", [])]
        for text in texts:
            words = tokens(text)
            if words:
                documents.append((name, Counter(words), len(words)))
    n = len(documents)
    df: Counter[str] = Counter()
    for _name, counts, _length in documents:
        df.update(counts.keys())
    idf = {w: math.log(1 + (n - d + 0.5) / (d + 0.5)) for w, d in df.items()}
    average = sum(length for _n, _c, length in documents) / n if n else 1.0
    return Index(documents=tuple(documents), idf=idf, average_length=average or 1.0)


def wants_person(text: str) -> bool:
    """The user asks for a person ("can I talk to a human?", "get me someone")."""
    return bool(_HUMAN.search(text))


def answers_question(messages: Sequence[Message]) -> str:
    """How the latest user message answers a question the assistant just asked: "value"
    (it carries a number, a sum, a date, quoted text), "short" (a few words), or ""."""
    if len(messages) < 3 or messages[-1]["role"] != "user":
        return ""
    asked = messages[-2]
    if asked["role"] != "assistant" or "?" not in asked["content"]:
        return ""
    latest = messages[-1]["content"]
    if _VALUE.search(latest):
        return "value"
    return "short" if len(latest.split()) <= 5 else ""
