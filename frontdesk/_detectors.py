"""The built-in personal-data detectors of `frontdesk.redaction`, checksums included.

A pattern alone over-matches (any 16 digits, any `12-34-56`), so each detector pairs a
permissive regular expression with a check of what it found: the Luhn digit of a card
number, the mod-97 remainder of an IBAN, the length and prefix of a phone number, the words
around a sort code or an account number. A candidate that fails its check is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["BUILTIN", "Detector", "Span", "iban_valid", "luhn_valid"]

Span = tuple[int, int]
"""A `(start, end)` slice of the text that holds one detected value."""

Finder = Callable[[str], Iterator[Span]]


@dataclass(frozen=True)
class Detector:
    """One kind of personal data and how to find it in a text."""

    name: str
    """The policy's name for it (`card`, `iban`, ...), also the label's source."""
    find: Finder
    """Yields the spans of the text that hold one value each."""
    hint: re.Pattern[str] | None = None
    """What a text must contain for `find` to be worth running (a quick pre-check)."""

    def spans(self, text: str) -> Iterator[Span]:
        """`find`, skipped when the text lacks the detector's hint."""
        if self.hint is None or self.hint.search(text):
            yield from self.find(text)

    @property
    def label(self) -> str:
        """What a value of this kind is replaced with in the `label` style, e.g. `[CARD]`."""
        return f"[{self.name.upper()}]"

    @classmethod
    def regex(cls, name: str, pattern: str | re.Pattern[str]) -> Detector:
        """A detector for every match of `pattern` (an extra detector of a policy)."""
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern

        def find(text: str) -> Iterator[Span]:
            for m in compiled.finditer(text):
                if m.end() > m.start():
                    yield m.span()

        return cls(name, find)


# -- card numbers -------------------------------------------------------------------------


def luhn_valid(digits: str) -> bool:
    """Whether a string of digits passes the Luhn check (the last digit of a card number)."""
    if not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


# Runs of digit groups joined by single spaces or dashes; the Luhn check picks the card.
_DIGIT_RUN = re.compile(r"(?<![\w-])\d(?:[ -]?\d){12,}(?![\w])")
_GROUP = re.compile(r"\d+")


def _cards(text: str) -> Iterator[Span]:
    for run in _DIGIT_RUN.finditer(text):
        groups = [(m.start() + run.start(), m.end() + run.start()) for m in _GROUP.finditer(run[0])]
        i = 0
        while i < len(groups):
            span = _card_from(text, groups, i)
            if span is None:
                i += 1
                continue
            yield span
            i = next(k for k, g in enumerate(groups) if g[1] == span[1]) + 1


def _card_from(text: str, groups: list[Span], first: int) -> Span | None:
    """The longest Luhn-valid run of 13 to 19 digits starting at group `first` (no card
    number starts with 0)."""
    if text[groups[first][0]] == "0":
        return None
    best = None
    digits = ""
    for last in range(first, len(groups)):
        digits += text[groups[last][0] : groups[last][1]]
        if len(digits) > 19:
            break
        if len(digits) >= 13 and luhn_valid(digits):
            best = (groups[first][0], groups[last][1])
    return best


# -- IBAN ---------------------------------------------------------------------------------

IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AT": 20, "BE": 16, "BG": 22, "CH": 21, "CY": 28, "CZ": 24,
    "DE": 22, "DK": 18, "EE": 20, "ES": 24, "FI": 18, "FR": 27, "GB": 22, "GI": 23,
    "GR": 27, "HR": 21, "HU": 28, "IE": 22, "IS": 26, "IT": 27, "LI": 21, "LT": 20,
    "LU": 20, "LV": 21, "MC": 27, "MT": 31, "NL": 18, "NO": 15, "PL": 28, "PT": 25,
    "RO": 24, "SE": 24, "SI": 19, "SK": 24, "SM": 27,
}  # fmt: skip
"""The fixed IBAN length of common countries (others are tried at every length)."""

_IBAN_RUN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}\d{2}(?: ?[A-Za-z0-9]){11,30}")


def iban_valid(iban: str) -> bool:
    """Whether `iban` (spaces allowed) has a valid country length and mod-97 checksum."""
    compact = iban.replace(" ", "").upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", compact):
        return False
    expected = IBAN_LENGTHS.get(compact[:2])
    if expected is not None and len(compact) != expected:
        return False
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def _ibans(text: str) -> Iterator[Span]:
    for run in _IBAN_RUN.finditer(text):
        # Character positions of the run's letters and digits (spaces skipped).
        places = [run.start() + i for i, ch in enumerate(run[0]) if ch != " "]
        compact = "".join(text[p] for p in places).upper()
        known = IBAN_LENGTHS.get(compact[:2])
        lengths = [known] if known else range(min(len(compact), 34), 14, -1)
        for n in lengths:
            end = places[n - 1] + 1 if n <= len(places) else None
            if end is None or (end < len(text) and text[end].isalnum()):
                continue
            if iban_valid(compact[:n]):
                yield run.start(), end
                break


# -- email --------------------------------------------------------------------------------

_EMAIL = re.compile(
    r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"
)


# -- phone numbers ------------------------------------------------------------------------

_INTERNATIONAL = re.compile(
    r"(?<![\w+])(?:\+|00)[1-9]\d{0,2}[ .-]?(?:\(0\)[ .-]?)?\(?\d{1,5}\)?(?:[ .-]?\d){5,12}(?!\d)"
)
_NATIONAL = re.compile(r"(?<![\w+/.-])(?:\(0\d{2,4}\)|0\d{1,4})(?:[ -]?\d){6,9}(?![\w/-])")
# Words after which a number of this shape is an order number, a reference, not a phone.
_NOT_A_PHONE = re.compile(
    r"(?i)(?:order|ref(?:erence)?|invoice|tracking|parcel|ticket|case|booking|no\.|#)"
    r"\W{0,3}(?:number|no\.?|id)?\W{0,3}$"
)


def _digits(s: str) -> str:
    return "".join(ch for ch in s if ch.isdigit())


def _reference(text: str, start: int) -> bool:
    """Whether the words just before `start` make the number there a reference."""
    return bool(_NOT_A_PHONE.search(text[max(0, start - 24) : start]))


def _phones(text: str) -> Iterator[Span]:
    for m in _INTERNATIONAL.finditer(text):
        if 8 <= len(_digits(m[0])) <= 15 and not _reference(text, m.start()):
            yield m.span()
    for m in _NATIONAL.finditer(text):
        digits = _digits(m[0])
        # UK national numbers: 0 then 9 or 10 digits, never 00 (that is an international
        # prefix) and never 04 or 06 (unassigned).
        if len(digits) not in (10, 11) or digits[1] in "046":
            continue
        if not _reference(text, m.start()):
            yield m.span()


# -- UK sort codes and account numbers -----------------------------------------------------

_SORT_CODE = re.compile(r"(?<![\d\w-])(\d{2})([- ]?)(\d{2})\2(\d{2})(?![\d\w-])")
_BANK_WORDS = re.compile(r"(?i)\b(?:sort[- ]?code|account|acct|a/c|bank)")
_ACCOUNT = re.compile(r"(?<![\d\w-])\d{4} ?\d{4}(?![\d\w-])")
_ACCOUNT_WORDS = re.compile(r"(?i)\b(?:account|acct|a/c)\b")
CONTEXT_CHARS = 40
"""How far before (or after) a number the words that make it bank data are looked for."""


def _near(pattern: re.Pattern[str], text: str, span: Span) -> bool:
    before = text[max(0, span[0] - CONTEXT_CHARS) : span[0]]
    after = text[span[1] : span[1] + CONTEXT_CHARS]
    return bool(pattern.search(before) or pattern.search(after))


def _sort_codes(text: str) -> Iterator[Span]:
    for m in _SORT_CODE.finditer(text):
        dd, mm = int(m[1]), int(m[3])
        # `12-03-24` may be a date; it is a sort code only among bank words. A shape no
        # date has (`12-34-56`) with dashes is one anywhere.
        could_be_date = 1 <= dd <= 31 and 1 <= mm <= 12
        if _near(_BANK_WORDS, text, m.span()) or (m[2] == "-" and not could_be_date):
            yield m.span()


def _accounts(text: str) -> Iterator[Span]:
    sort_codes = list(_sort_codes(text))
    for m in _ACCOUNT.finditer(text):
        beside_code = any(abs(m.start() - e) <= CONTEXT_CHARS or abs(s - m.end()) <= CONTEXT_CHARS
                          for s, e in sort_codes)  # fmt: skip
        if beside_code or _near(_ACCOUNT_WORDS, text, m.span()):
            yield m.span()


_SIX_DIGITS = re.compile(r"\d{2}\D?\d{2}\D?\d{2}")
_AT = re.compile("@")

BUILTIN: tuple[Detector, ...] = (
    Detector("iban", _ibans, re.compile(r"[A-Za-z]{2}\d{2}")),
    Detector("card", _cards, _SIX_DIGITS),
    Detector("email", lambda text: (m.span() for m in _EMAIL.finditer(text)), _AT),
    Detector("sort_code", _sort_codes, _SIX_DIGITS),
    Detector("account", _accounts, _SIX_DIGITS),
    Detector("phone", _phones, _SIX_DIGITS),
)
"""The built-in detectors, in priority order: where two overlap, the earlier one wins."""
