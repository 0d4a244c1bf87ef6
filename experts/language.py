"""The language of a customer's message: a BCP 47 tag (`en`, `cy`, `es`, `hi`).

Triage's structured answer carries the language it read (`TriageResult.language`); this
detector keeps the label honest where no model reads it: the offline stand-in's triage, a
turn routed without triage (an answer to the bot's own question), and a triage answer
that gave none. It runs `langdetect` (Google's language-detection profiles, 55 languages,
among them Welsh and Hindi) with a fixed seed, so the same text always gets the same
label. A message too short to tell ("£12", "yes") gets `None`: the turn keeps the
conversation's language (`orchestrator/language.py`).
"""

from __future__ import annotations

import functools
import re
import threading
import unicodedata
from typing import Any

MIN_LETTERS = 12
"""Fewer letters than this say too little about a language to label it."""
MIN_CONFIDENCE = 0.90
"""A label less probable than this is no label."""

_ENGLISH = frozenset(
    "the you your my are do does can could would like want what where when how please"
    " some and of it this that with have has not from about there their which".split()
)
"""English function words (none is a word of Welsh, Spanish or Hindi in Latin script): an
ASCII message with two of them is English, without running the detector (most messages,
at a set's cost; the detector takes about a millisecond), and so is one the detector is
unsure of (short English is often read as Norwegian or Afrikaans at 0.4 to 0.86)."""

NAMES = {
    "en": "English", "cy": "Welsh", "es": "Spanish", "hi": "Hindi", "fr": "French",
    "de": "German", "it": "Italian", "pt": "Portuguese", "nl": "Dutch", "pl": "Polish",
    "ar": "Arabic", "ur": "Urdu", "bn": "Bengali", "ta": "Tamil", "te": "Telugu",
    "mr": "Marathi", "gu": "Gujarati", "pa": "Punjabi", "kn": "Kannada", "ml": "Malayalam",
    "ga": "Irish", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "tr": "Turkish",
    "ru": "Russian", "uk": "Ukrainian", "sv": "Swedish", "da": "Danish", "no": "Norwegian",
    "fi": "Finnish", "el": "Greek", "he": "Hebrew", "ro": "Romanian", "cs": "Czech",
}  # fmt: skip
"""Names of common languages, for the response expert's instruction."""

_TAG = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
_LOCK = threading.Lock()


def name_of(tag: str) -> str:
    """The language's English name ("Welsh"), or the tag itself when not listed."""
    return NAMES.get(primary(tag), tag)


def primary(tag: str) -> str:
    """The tag's language subtag, lower case (`"en-GB"` -> `"en"`)."""
    return tag.split("-", 1)[0].lower()


def valid_tag(tag: object) -> str | None:
    """`tag` normalised (`"EN-gb"` -> `"en-GB"`) when it looks like a BCP 47 language tag,
    else `None` (a model's free text is no label)."""
    if not isinstance(tag, str) or not _TAG.match(tag.strip()):
        return None
    first, *rest = tag.strip().split("-")
    return "-".join([first.lower(), *(r.upper() if len(r) == 2 else r for r in rest)])


@functools.cache
def _factory() -> Any:
    """The detector's profiles, loaded once per process (about half a second)."""
    from langdetect import DetectorFactory
    from langdetect.detector_factory import PROFILES_DIRECTORY

    factory = DetectorFactory()
    factory.load_profile(PROFILES_DIRECTORY)
    factory.seed = 0  # The same text, the same label.
    return factory


def detect(text: str) -> str | None:
    """The language of `text` (a BCP 47 primary tag), or `None` when it is too short or
    the detector is not sure."""
    if not _enough_letters(text):
        return None
    if _plainly_english(text):
        return "en"
    from langdetect.lang_detect_exception import LangDetectException

    with _LOCK:  # One detector at a time: its random source is the factory's.
        detector = _factory().create()
        detector.append(text)
        try:
            best = detector.get_probabilities()
        except LangDetectException:
            return None
    if not best or best[0].prob < MIN_CONFIDENCE:
        return None
    return str(best[0].lang).split("-", 1)[0]


_ASCII_LETTERS = re.compile(rf"(?:[^A-Za-z]*[A-Za-z]){{{MIN_LETTERS}}}")
"""At least `MIN_LETTERS` letters, in ASCII text (whose only letters are A-Z and a-z)."""


def _enough_letters(text: str) -> bool:
    """Whether `text` has `MIN_LETTERS` letters (Unicode categories L and M) or more."""
    if text.isascii():  # Most messages: read by a regular expression, not per character.
        return _ASCII_LETTERS.match(text) is not None
    return sum(1 for c in text if unicodedata.category(c)[0] in "LM") >= MIN_LETTERS


def _plainly_english(text: str) -> bool:
    """Whether `text`, in ASCII, has two or more of the common English words `_ENGLISH`."""
    if not text.isascii():
        return False
    return len(_ENGLISH_BYTES.intersection(_ascii_words(text))) >= 2


_ENGLISH_BYTES = frozenset(word.encode() for word in _ENGLISH)

_WORD_BYTES = bytes(c if ord("a") <= c <= ord("z") else ord(" ") for c in range(256))
"""`bytes.translate`'s table: a-z kept, every other byte a space."""


def _ascii_words(text: str) -> list[bytes]:
    """The a-z words of ASCII `text` once lower-cased (what `re.findall("[a-z]+",
    text.lower())` finds), as bytes: a table and a split, a third of the expression's cost
    (every turn reads its message's language)."""
    return text.lower().encode("ascii").translate(_WORD_BYTES).split()


def warm() -> None:
    """Load the detector's profiles now, not in the first turn that needs them."""
    with _LOCK:
        _factory()


_warming: list[threading.Thread] = []


def warm_in_background() -> None:
    """`warm` in a daemon thread, once per process (the open of an orchestrator with
    `languages`): a turn that needs the detector meanwhile waits for it rather than
    loading it twice. Elsewhere the first message that needs it (not plainly English)
    loads it, about a second once per process; most turns never do."""
    if not _warming:
        thread = threading.Thread(target=warm, name="frontdesk-language", daemon=True)
        _warming.append(thread)
        thread.start()
