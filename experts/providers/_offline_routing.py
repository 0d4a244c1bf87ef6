"""The offline stand-in's triage: BM25 nearest neighbour over each category's examples.

Every example of every category, and each category's name with its description, is a
short document; a message goes to the category whose documents BM25 scores highest
against it (Robertson and Zaragoza's Okapi weighting; a word's weight is the mean of its
rarity among the documents and among the categories, so a word that many examples of
one category repeat still counts). When the category's documents share too little of the
message's (rarer) words, the message is out of scope: `OTHER`.

Words are lower-cased, stripped of common function words, and stemmed lightly
("charged", "charges", "charge" -> "charg"; "verified" -> "verify"; "stopped" -> "stop");
"n't" becomes the word "not" ("hasn't arrived" -> "has", "not", "arriv").

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
OUT_OF_SCOPE = 0.22
"""Below this share of the message's IDF weight matched, the message is out of scope
(chosen on CLINC150's `val` and `oos_val` + `oos_train`, never its test split: in-scope
accuracy against out-of-scope recall; docs/benchmarks.md)."""

STOP = frozenset(
    "a an and are as at be but by can could do does for from have i i'd i'm in is it its"
    " me my of on or our please so that the this to was we will with would you your yours"
    " it's im id like want need get just also some any hi hello thanks".split()
)
"""Words that say nothing about the topic. The question words ("what", "when", "where",
"which") are kept: "when will my card arrive" and "where is my card" are different asks."""
_NOT = {"can't": "can", "won't": "will", "ain't": "is", "shan't": "shall"}
_CLITICS = ("'ve", "'ll", "'re", "'d", "'m")
_VOWELS = frozenset("aeiou")
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


def stem(word: str) -> str:
    """A light suffix stripper: plural, -ed and -ing off, a doubled consonant undone, a
    final e dropped, so the forms of one verb or noun meet ("charge"/"charged"/"charges",
    "cancel"/"cancelled", "top"/"topped", "verify"/"verified"). Lighter than Porter's."""
    if len(word) > 4 and word.endswith(("ies", "ied")):
        word = word[:-3] + "y"
    else:
        for suffix in ("ing", "ed", "es", "s"):
            if len(word) > len(suffix) + 2 and word.endswith(suffix) and not word.endswith("ss"):
                word = word[: -len(suffix)]
                if (
                    len(word) > 3
                    and word[-1] == word[-2]
                    and word[-1] not in _VOWELS
                    and word[-1] not in "lsz"
                ):
                    word = word[:-1]
                break
    if len(word) > 5 and word.endswith("ll"):
        word = word[:-1]  # "cancell(ed)", "travell(ing)", "install" (but "call", "still")
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def tokens(text: str) -> list[str]:
    """The words of `text` that routing compares, in order (stop words out, stemmed)."""
    found = []
    for word in re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower().replace("\u2019", "'")):
        word = word.removesuffix("'s")
        for clitic in _CLITICS:
            word = word.removesuffix(clitic)
        negated = word.endswith("n't")
        if negated:
            word = _NOT.get(word, word[:-3])
        if word and word not in STOP:
            found.append(stem(word))
        if negated:
            found.append("not")
    return found


@dataclass(frozen=True)
class Route:
    """A category and how sure the match is (the share of the message's weight matched)."""

    category: str
    share: float
    words: tuple[str, ...]


@dataclass(frozen=True)
class Index:
    """BM25 statistics over the categories' documents."""

    documents: tuple[tuple[str, int], ...]
    """(category, length) per document."""
    postings: Mapping[str, tuple[tuple[int, int], ...]]
    """Per word, (document, count) of each document that has it."""
    idf: Mapping[str, float]
    average_length: float

    def route(self, words: Sequence[str]) -> Route | None:
        """The best category for `words`, or None when no document shares a word.

        A category scores the sum of its documents' BM25 scores, the best counted in full
        and each next one by `DECAY` less (several close examples outvote one); its share
        is the weight of the message's words that its documents have, over the weight of
        them all (a word no document has weighs as much as the rarest)."""
        unique = list(dict.fromkeys(words))
        query = [w for w in unique if w in self.idf]
        if not query:
            return None
        scores: dict[int, float] = {}
        shared: dict[int, list[str]] = {}
        for w in query:
            weight = self.idf[w] * (K1 + 1)
            for document, tf in self.postings[w]:
                length = self.documents[document][1]
                norm = K1 * (1 - B + B * length / self.average_length)
                scores[document] = scores.get(document, 0.0) + weight * tf / (tf + norm)
                shared.setdefault(document, []).append(w)
        by_category: dict[str, list[tuple[float, int]]] = {}
        for document, score in scores.items():
            by_category.setdefault(self.documents[document][0], []).append((score, document))
        best, best_total = "", 0.0
        best_found: list[tuple[float, int]] = []
        for category, found in by_category.items():
            found.sort(key=lambda s: (-s[0], s[1]))
            total = sum(score * DECAY**i for i, (score, _d) in enumerate(found))
            if total > best_total:
                best, best_total, best_found = category, total, found
        words = tuple(dict.fromkeys(w for _s, document in best_found for w in shared[document]))
        # A word no document has counts against the share (it may be what the message is
        # about), a number does not (it is a value: an order number, a sum).
        unknown = [w for w in unique if w not in self.idf and not w.isdigit()]
        weight = _unknown_weight(len(self.documents))
        possible = sum(self.idf[w] for w in query) + weight * len(unknown)
        matched = sum(self.idf[w] for w in words)
        return Route(category=best, share=matched / possible, words=words)


def _unknown_weight(n: int) -> float:
    """A word no document has weighs as much as the rarest word would (it is informative)."""
    return math.log(1 + (n + 0.5) / 0.5)


def build_index(
    categories: Mapping[str, Any], names: Sequence[str], tokens: Callable[[str], list[str]]
) -> Index:
    """Index each example, and each name with its description, as a document."""
    documents: list[tuple[str, int]] = []
    postings: dict[str, list[tuple[int, int]]] = {}
    used_by: dict[str, set[str]] = {}
    for name, info in categories.items():
        if name not in names:
            continue
        texts = [name.replace("_", " ").lower() + " " + str(info.get("description", ""))]
        texts += [str(e) for e in info.get("examples", [])]
        for text in texts:
            words = tokens(text)
            if words:
                for w, count in Counter(words).items():
                    postings.setdefault(w, []).append((len(documents), count))
                    used_by.setdefault(w, set()).add(name)
                documents.append((name, len(words)))
    n, c = len(documents), len({name for name, _length in documents})
    idf = {w: (_idf(n, len(found)) + _idf(c, len(used_by[w]))) / 2 for w, found in postings.items()}
    average = sum(length for _n, length in documents) / n if n else 1.0
    return Index(
        documents=tuple(documents),
        postings={w: tuple(found) for w, found in postings.items()},
        idf=idf,
        average_length=average or 1.0,
    )


def _idf(total: int, having: int) -> float:
    return math.log(1 + (total - having + 0.5) / (having + 0.5))


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
