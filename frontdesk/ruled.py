"""Ruled values: the values of a request's ruled fields (`Redact("drop")`, `mask`,
`pseudonymise`), and how they are kept out of everything but the handler.

Within a turn the values are known in clear (`TurnSecrets`): the stored user message, the
stored outcome, the reply, the response expert's thread and every answer and event show
them as their rule says (`[PIN]`, `******1234`). After the turn only a keyed digest of each
value is kept, per user (`RuledValue`, table `ruled_value`), never the value: a
`RuledValues` scanner finds a value again in any text (a memory the memory expert wrote, a
summary, an export of another conversation of the same user) by digesting the text's
word runs, so a value said once is recognised wherever it turns up later.

A digest is an HMAC of the value's letters and digits (case folded: "739 164" and "739164"
are the same value) under a per-user key derived from the installation secret
(`$FRONTDESK_REDACTION_SECRET`, else one derived from `$FRONTDESK_MASTER_KEY`). Without
either, the key is a fixed one, so digests still match across processes (and the audit
holds the clear values anyway, as no master key encrypts it).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from frontdesk.redaction import MASTER_KEY_ENV, MIN_SUBSTITUTED, SECRET_ENV, Redactor, Rule

__all__ = [
    "MAX_WORDS",
    "RuledValue",
    "RuledValues",
    "TurnSecrets",
    "digest",
    "normalised",
    "ruled_key",
    "shown_request",
]

MAX_WORDS = 8
"""A value is found again in free text when it spans at most this many word runs."""
_WORD = re.compile(r"[^\W_]+")
_UNKEYED = b"frontdesk ruled values (no installation secret set)"


def ruled_key(secret: bytes | str | None = None) -> bytes:
    """The installation key ruled values are digested with: `secret`, else
    `$FRONTDESK_REDACTION_SECRET`, else one derived from `$FRONTDESK_MASTER_KEY`, else a
    fixed key (digests are then only as good as a plain hash)."""
    configured = secret if secret is not None else os.environ.get(SECRET_ENV)
    if configured:
        return configured.encode() if isinstance(configured, str) else configured
    master = os.environ.get(MASTER_KEY_ENV)
    if master:
        return hmac.new(master.encode(), b"frontdesk ruled values", "sha256").digest()
    return _UNKEYED


def normalised(value: str) -> str:
    """A value as it is digested: its letters and digits, case folded."""
    return "".join(_WORD.findall(value)).casefold()


def digest(key: bytes, user: str, value: str) -> str:
    """The keyed digest of `value` (already `normalised`) for `user`."""
    user_key = hmac.new(key, b"user:" + user.encode(), hashlib.sha256).digest()
    return hmac.new(user_key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class RuledValue:
    """One ruled value as it is kept after its turn: who said it, where, its field and rule,
    what it is shown as, and its digest (never the value)."""

    user: str
    """The user the value belongs to (`conversation:<id>` for a conversation without one)."""
    conversation_id: str
    message_id: str
    field: str
    rule: str
    shown: str
    digest: str
    length: int
    """The length of the normalised value (a scan digests only word runs this long)."""


def owner_of(user_id: str | None, conversation_id: str) -> str:
    """Whose values these are: the user, or the conversation when it has no user."""
    return user_id if user_id is not None else f"conversation:{conversation_id}"


class RuledValues:
    """Finds the kept values of one user in any text, by digest (see the module docstring).

    Args:
        key: the installation key (`ruled_key`).
        user: whose values these are.
        rows: the user's kept values.
    """

    def __init__(self, key: bytes, user: str, rows: Iterable[RuledValue]) -> None:
        self.key, self.user = key, user
        self.shown: dict[str, str] = {r.digest: r.shown for r in rows}
        self.lengths = frozenset(r.length for r in rows)
        self._longest = max(self.lengths, default=0)
        self._seen: dict[str, dict[str, str]] = {}

    def __bool__(self) -> bool:
        return bool(self.shown)

    def found(self, text: str) -> dict[str, str]:
        """The spans of `text` that are kept values, each with what it is shown as."""
        if not self.shown or not text:
            return {}
        known = self._seen.get(text)
        if known is not None:
            return known
        words = list(_WORD.finditer(text))
        known = {}
        for i, first in enumerate(words):
            run = ""
            for last in words[i : i + MAX_WORDS]:
                run += last.group().casefold()
                if len(run) > self._longest:
                    break
                if len(run) in self.lengths:
                    shown = self.shown.get(digest(self.key, self.user, run))
                    if shown is not None:
                        start, end = _widened(text, first.start(), last.end(), shown)
                        known[text[start:end]] = shown
        self._seen[text] = known
        return known

    def text(self, text: str) -> str:
        """`text` with every kept value in it replaced by what it is shown as."""
        return replaced(text, self.found(text))

    def value(self, value: Any) -> Any:
        """A JSON value with `text` applied to every string in it (and to long numbers)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        if isinstance(value, int) and not isinstance(value, bool):
            shown = self.text(str(value))
            return value if shown == str(value) else shown
        return value


_LEAD = re.compile(r"^[^\w*]+")  # `*` stands for a masked letter or digit.
_TRAIL = re.compile(r"[^\w*]+$")


def _widened(text: str, start: int, end: int, shown: str) -> tuple[int, int]:
    """A found value's span, taking in the signs around its words that its shown form keeps
    (`+44 7700 900123` is found from `44`; masked, it is shown `+** **** **0123`)."""
    lead, trail = _LEAD.match(shown), _TRAIL.search(shown)
    if lead and text[max(0, start - len(lead.group())) : start] == lead.group():
        start -= len(lead.group())
    if trail and text[end : end + len(trail.group())] == trail.group():
        end += len(trail.group())
    return start, end


def replaced(text: str, known: Mapping[str, str]) -> str:
    """`text` with each of `known`'s values replaced by its shown form (longest first)."""
    for value in sorted(known, key=len, reverse=True):
        if value in text:
            text = text.replace(value, known[value])
    return text


def shown_request(data: Any, rules: Mapping[str, Rule], redactor: Redactor, user_id: str | None,
                  path: str = "") -> Any:  # fmt: skip
    """A request payload as people may see it: each ruled field in its shown form (`drop`:
    `[FIELD]`, `mask`: the masked form, `pseudonymise`: a token), the rest as is."""
    if isinstance(data, list):
        return [shown_request(v, rules, redactor, user_id, path) for v in data]
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        here = f"{path}.{key}" if path else key
        rule = redactor.rule_for(here, rules)
        if rule is None:
            out[key] = shown_request(value, rules, redactor, user_id, here)
        elif rule == "drop":
            out[key] = None if value is None else f"[{key.upper()}]"
        else:
            out[key] = redactor.ruled(rule, value, user_id)
    return out


@dataclass(frozen=True, kw_only=True)
class TurnSecrets:
    """The ruled values of one turn's request, in clear (only in the turn's memory)."""

    known: Mapping[str, str]
    """Each value (as it appears in text) -> what it is shown as."""
    rows: Sequence[RuledValue]
    """What is kept of them after the turn."""
    request: Any
    """The request as people may see it (`shown_request`)."""

    def text(self, text: str) -> str:
        """`text` with the turn's values replaced by their shown forms."""
        return replaced(text, self.known)

    @classmethod
    def of(
        cls,
        data: Any,
        rules: Mapping[str, Rule],
        redactor: Redactor,
        *,
        key: bytes,
        user_id: str | None,
        conversation_id: str,
        message_id: str,
    ) -> TurnSecrets:
        """The secrets of a request payload `data` whose model declares `rules`."""
        user = owner_of(user_id, conversation_id)
        known: dict[str, str] = {}
        rows: dict[str, RuledValue] = {}
        for field, rule, leaf, shown in redactor.ruled_leaves(data, rules, user_id=user_id):
            known[leaf] = shown
            value = normalised(leaf)
            if len(value) < MIN_SUBSTITUTED:
                continue
            d = digest(key, user, value)
            rows[d] = RuledValue(
                user=user,
                conversation_id=conversation_id,
                message_id=message_id,
                field=field,
                rule=rule,
                shown=shown,
                digest=d,
                length=len(value),
            )
        return cls(
            known=known,
            rows=list(rows.values()),
            request=shown_request(data, rules, redactor, user_id),
        )
