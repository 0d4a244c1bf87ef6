"""The offline stand-in's value finders: dates, times, amounts and free text in user turns.

Each finder returns the mentions it sees, in order, with the word before them, so that
the caller can give each field its own value: a `date_from` the date after "from", a
`date_to` the one after "until", and never the same mention to two fields.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

_MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        start=1,
    )
    for m in names
}
_DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_MONTH = "(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(?P<year>(?:19|20)\d\d))?"
_WEEKDAY = "(?:" + "|".join(_DAYS) + r")\s+"
_DATES = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"\b(?P<iso>(?:19|20)\d\d-[01]\d-[0-3]\d)\b",
        rf"\b(?:{_WEEKDAY})?(?:the\s+)?{_DAY}\s+(?:of\s+)?{_MONTH}{_YEAR}\b",
        rf"\b(?:{_WEEKDAY})?{_MONTH}\s+(?:the\s+)?{_DAY}{_YEAR}\b",
        r"\b(?P<rel>(?:the\s+)?day after tomorrow|today|tonight|tomorrow|yesterday)\b",
        r"\bin\s+(?P<n>\d+|a|one|two|three|four|five|six|seven|ten)\s+(?P<unit>days?|weeks?)\b",
        r"\b(?:this\s+|next\s+|coming\s+)?(?P<weekday>" + "|".join(_DAYS) + r")\b",
        r"\b(?:the\s+)?(?P<alone>[0-3]?\d(?:st|nd|rd|th))\b",
    )
]
_SMALL = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
_SMALL |= {"ten": 10}
_FROM = re.compile(
    r"(from|between|starting|start|arriv\w*|check(?:ing)?[\s-]*in|beginning)\W*(?:on\W*)?$",
    re.I,
)
_TO = re.compile(
    r"(to|until|till|til|through|and|leaving|depart\w*|check(?:ing)?[\s-]*out|-)\W*(?:on\W*)?$",
    re.I,
)


@dataclass(frozen=True)
class Mention:
    """A value found in a text, where, and whether a "from" or "to" word leads to it."""

    value: Any
    start: int
    end: int
    cue: str  # "from", "to" or ""


def dates_in(text: str, today: dt.date) -> list[Mention]:
    """Every date `text` names: ISO, "1 June", "June 1st", "tomorrow", "next Friday",
    "in 3 days", "the 9th" (the next such day on or after `today` when no year is given)."""
    return _mentions(text, [(p, lambda m: _date(m, today)) for p in _DATES])


def _mentions(text: str, patterns: list[tuple[re.Pattern[str], Any]]) -> list[Mention]:
    """The values the patterns find, the first pattern winning where matches overlap."""
    found: list[Mention] = []
    for pattern, read in patterns:
        for match in pattern.finditer(text):
            if any(m.start < match.end() and match.start() < m.end for m in found):
                continue
            value = read(match)
            if value is not None:
                cue = _cue(text, match.start())
                found.append(Mention(value, match.start(), match.end(), cue))
    return sorted(found, key=lambda m: m.start)


def _date(m: re.Match[str], today: dt.date) -> dt.date | None:
    g = {k: v for k, v in m.groupdict().items() if v}
    try:
        if "iso" in g:
            return dt.date.fromisoformat(g["iso"])
        if "month" in g:
            month, day = _MONTHS[g["month"].lower().rstrip(".")], int(g["day"])
            if "year" in g:
                return dt.date(int(g["year"]), month, day)
            found = dt.date(today.year, month, day)
            return found if found >= today else dt.date(today.year + 1, month, day)
        if "rel" in g:
            shift = {"today": 0, "tonight": 0, "tomorrow": 1, "yesterday": -1}
            return today + dt.timedelta(days=shift.get(g["rel"].lower(), 2))
        if "n" in g:
            n = int(g["n"]) if g["n"].isdigit() else _SMALL[g["n"].lower()]
            return today + dt.timedelta(days=n * (7 if g["unit"].lower().startswith("w") else 1))
        if "weekday" in g:
            ahead = (_DAYS.index(g["weekday"].lower()) - today.weekday()) % 7 or 7
            return today + dt.timedelta(days=ahead)
        if "alone" in g:
            day = int(re.sub(r"\D", "", g["alone"]))
            month, year = today.month, today.year
            if day < today.day:
                month, year = (1, year + 1) if month == 12 else (month + 1, year)
            return dt.date(year, month, day)
    except (ValueError, KeyError):
        return None
    return None


_HOUR_WORDS = {"noon": (12, 0), "midday": (12, 0), "midnight": (0, 0)}
_TIME = re.compile(
    r"\b(?:"
    r"(?P<word>noon|midday|midnight)"
    r"|(?:(?P<rel>half|quarter|\d{1,2})\s+(?P<dir>past|to)\s+)?"
    r"(?P<h>[0-2]?\d)(?:[:.\s](?P<m>[0-5]\d))?\s*"
    r"(?P<ap>a\.?m\.?|p\.?m\.?|o'?clock|in the morning|in the evening|in the afternoon|"
    r"at night|evening|afternoon|morning|night)"
    r"|(?P<h24>[01]?\d|2[0-3]):(?P<m24>[0-5]\d)"
    r")(?![\w])",
    re.IGNORECASE,
)


def times_in(text: str) -> list[Mention]:
    """Every time of day `text` names: "7pm", "7:30 a.m.", "19:55", "half past 6 in the
    evening", "25 to 8 p.m.", "noon"."""
    return _mentions(text, [(_TIME, _time)])


def _time(m: re.Match[str]) -> dt.time | None:
    g = {k: v for k, v in m.groupdict().items() if v}
    if "word" in g:
        return dt.time(*_HOUR_WORDS[g["word"].lower()])
    if "h24" in g:
        return dt.time(int(g["h24"]), int(g["m24"]))
    hour, minute = int(g["h"]), int(g.get("m", 0))
    ap = g.get("ap", "").lower().replace(".", "")
    later = ap.startswith("p") or any(w in ap for w in ("evening", "afternoon", "night"))
    if later and hour < 12 and not (ap.endswith("night") and hour < 5):
        hour += 12
    if ap.startswith("a") and hour == 12:
        hour = 0
    if "rel" in g:
        shift = {"half": 30, "quarter": 15}.get(g["rel"].lower())
        shift = int(g["rel"]) if shift is None else shift
        total = hour * 60 + (shift if g["dir"].lower() == "past" else -shift)
        hour, minute = divmod(total % (24 * 60), 60)
    if hour > 23 or minute > 59:
        return None
    return dt.time(hour, minute)


_CURRENCY = r"(?:£|\$|€|₹|¥)"
_CODE = r"(?:GBP|USD|EUR|INR|JPY|CHF|AUD|CAD|pounds?|dollars?|euros?|rupees?|quid|bucks)"
_AMOUNT = re.compile(
    rf"(?:{_CURRENCY}\s?(?P<a>\d[\d,]*(?:\.\d+)?)"
    rf"|(?P<b>\d[\d,]*(?:\.\d+)?)\s?(?:{_CURRENCY}|{_CODE}\b)"
    rf"|\b{_CODE}\s?(?P<c>\d[\d,]*(?:\.\d+)?))",
    re.IGNORECASE,
)


def amounts_in(text: str) -> list[Mention]:
    """Every sum of money `text` names: "£12", "12.50 EUR", "USD 30", "40 pounds"."""
    return _mentions(text, [(_AMOUNT, _amount)])


def _amount(match: re.Match[str]) -> Decimal | None:
    raw = (match.group("a") or match.group("b") or match.group("c")).replace(",", "")
    try:
        return Decimal(raw)
    except InvalidOperation:
        return None


_QUOTED = re.compile(r"[\"“]([^\"”]{2,200})[\"”]|'([^']{2,200})'(?!\w)")


def string_for(name: str, text: str) -> str | None:
    """Free text for the field `name`: after "name:" or the field's own words ("reason:
    it arrived cold", "my reason is ..."), after "because" for a reason, else quoted text."""
    words = [w for w in name.lower().split("_") if w not in ("the", "of", "text")]
    labels = [r"[\s_-]+".join(re.escape(w) for w in words)] + words[-1:]
    for label in labels:
        labelled = re.search(
            rf"\b(?:my\s+|the\s+)?{label}\s*(?::|=|\bis\b|\bwas\b)\s*(?P<v>[^.;!?,\n]+)",
            text,
            re.I,
        )
        if labelled:
            quoted = _QUOTED.match(labelled.group("v").strip())
            return _clean(quoted.group(1) or quoted.group(2) if quoted else labelled.group("v"))
    if words and words[-1] in ("reason", "why", "cause", "explanation", "complaint"):
        because = re.search(r"\b(?:because|since|as|due to)\s+(?P<v>[^.;!?\n]+)", text, re.I)
        if because:
            return _clean(because.group("v"))
    quoted = _QUOTED.search(text)
    if quoted:
        return _clean(quoted.group(1) or quoted.group(2))
    return None


def _clean(value: str) -> str | None:
    value = " ".join(value.split()).strip(" ,-\"'“”")
    return value or None


def _cue(text: str, start: int) -> str:
    before = text[max(0, start - 24) : start]
    if _FROM.search(before):
        return "from"
    if _TO.search(before):
        return "to"
    return ""


def role_of(name: str) -> str:
    """Whether a field is the start ("from") or end ("to") of a period, or neither."""
    lowered = name.lower()
    if re.search(r"(^|_)(from|start|begin|arrival|check_?in|since)($|_)", lowered):
        return "from"
    if re.search(r"(^|_)(to|end|until|departure|check_?out|till)($|_)", lowered):
        return "to"
    return ""


def assign(fields: list[str], mentions: list[Mention]) -> dict[str, Any]:
    """Give each field one mention, each mention to one field at most: "from" and "to"
    fields take the mentions cued so, then the remaining fields take the rest in order."""
    out: dict[str, Any] = {}
    free = list(mentions)
    for role in ("from", "to"):
        for name in [f for f in fields if role_of(f) == role]:
            cued = next((m for m in free if m.cue == role), None)
            if cued is not None:
                out[name] = cued.value
                free.remove(cued)
    plain = [f for f in fields if role_of(f) == "" and f not in out]
    for name in plain:
        if free:
            out[name] = free.pop(0).value
    # A period named by two plain mentions ("1 to 5 June"): the first starts it.
    for role in ("from", "to"):
        for name in [f for f in fields if role_of(f) == role and f not in out]:
            if free:
                out[name] = free.pop(0).value
    return out
