"""Redaction: what the clear-text views show of a user's personal data.

The models are sent what the user wrote (the request expert needs the real card digits), and
the thread and the audit log store it (encrypted, when a master key is set). What ops *see*
is another matter: `frontdesk audit show`, the HTML and JSONL exports and the logs pass what
they show through a `Redactor`, which replaces

- what the built-in detectors find in any text: card numbers (Luhn-checked), IBANs (mod-97
  checked), email addresses, phone numbers (international and UK formats), UK sort codes
  and account numbers (among bank words, or beside a sort code); plus a policy's own regex
  detectors;
- the fields of a category's request model that carry a rule, through an annotation
  (`Annotated[str, Redact("mask")]`) or `Field(json_schema_extra={"redact": "mask"})`:
  `keep` (shown as is, no detector runs on it), `mask` (the last 4 characters shown),
  `pseudonymise` (a stable per-user token, an HMAC of the value) or `drop` (left out).
  Wherever a ruled field's value also appears in a text (the user's message, a raw model
  response), it is replaced there too.

Secrets (API keys, URL passwords) are masked as well, through `frontdesk.masking.scrub`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from frontdesk._detectors import BUILTIN, Detector, Span, iban_valid, luhn_valid
from frontdesk._field_rules import (
    Redact,
    Rule,
    Style,
    field_rules,
    rule_named,
    schema_without_rules,
    style_named,
)
from frontdesk.errors import ConfigError
from frontdesk.masking import scrub

__all__ = [
    "BUILTIN_DETECTORS",
    "DETECTOR_NAMES",
    "MASK_CHAR",
    "SECRET_ENV",
    "Detector",
    "Redact",
    "RedactionPolicy",
    "Redactor",
    "Rule",
    "Style",
    "field_rules",
    "iban_valid",
    "luhn_valid",
    "mask",
    "redactor_of",
    "schema_without_rules",
]


BUILTIN_DETECTORS: Mapping[str, Detector] = {d.name: d for d in BUILTIN}
"""The built-in detectors by name: `iban`, `card`, `email`, `sort_code`, `account`, `phone`."""
DETECTOR_NAMES: tuple[str, ...] = tuple(BUILTIN_DETECTORS)
MASK_CHAR = "*"
SECRET_ENV = "FRONTDESK_REDACTION_SECRET"
"""The installation secret pseudonyms are keyed with, when the policy names none."""
MASTER_KEY_ENV = "FRONTDESK_MASTER_KEY"
MIN_SUBSTITUTED = 4
"""Ruled field values shorter than this are not searched for in free text (`2` bags)."""


def mask(value: str, *, keep: int = 4) -> str:
    """`value` with every letter and digit but the last `keep` replaced by `*`.

    Separators stay, so `4111 1111 1111 1111` reads `**** **** **** 1111`.
    """
    places = [i for i, ch in enumerate(value) if ch.isalnum()]
    hidden = set(places[: max(0, len(places) - keep)])
    return "".join(MASK_CHAR if i in hidden else ch for i, ch in enumerate(value))


# -- the policy ----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RedactionPolicy:
    """What the clear-text views redact, and how.

    ```python
    policy = RedactionPolicy(
        detectors={"card", "iban", "email"},      # the built-ins to run (default: all)
        style="label",                             # [CARD]; or "mask", "pseudonymise"
        styles={"card": "mask"},                   # per detector
        extra={"order_ref": r"\\bORD-\\d{6}\\b"},     # your own detectors (name -> regex)
        fields={"card_number": "mask"},            # per-field rules, by name or dotted path
    )
    orch = Orchestrator(categories, redaction=policy)
    ```

    A policy can also be read from a JSON file (`RedactionPolicy.from_file`), which is how
    the CLI takes one (`--redaction FILE` or `$FRONTDESK_REDACTION_POLICY`).
    """

    detectors: Collection[str] = DETECTOR_NAMES
    """The built-in detectors to run, by name (see `DETECTOR_NAMES`)."""
    style: Style = "label"
    """How a detected value is replaced, unless `styles` names its detector."""
    styles: Mapping[str, Style] = field(default_factory=dict)
    """A replacement style per detector name (built-in or extra)."""
    extra: Mapping[str, str | re.Pattern[str]] = field(default_factory=dict)
    """More detectors: name -> regular expression; every match is replaced."""
    fields: Mapping[str, Rule] = field(default_factory=dict)
    """Per-field rules for request payloads, by dotted path (`card.number`) or by field name
    anywhere (`card_number`); they win over the rules the request models declare."""
    secret: bytes | str | None = None
    """The installation secret pseudonyms are keyed with. `None`: `$FRONTDESK_REDACTION_SECRET`,
    else one derived from `$FRONTDESK_MASTER_KEY`, else a random one for this process (stable
    within a run, not across runs)."""
    secrets: bool = True
    """Also mask API keys, bearer tokens and URL passwords (`frontdesk.masking.scrub`)."""

    def __post_init__(self) -> None:
        unknown = set(self.detectors) - set(DETECTOR_NAMES)
        if unknown:
            raise ConfigError(
                f"RedactionPolicy: unknown detector(s) {sorted(unknown)}; built-in detectors"
                f" are {list(DETECTOR_NAMES)} (add your own through extra={{name: regex}})"
            )
        for name, pattern in self.extra.items():
            if name in DETECTOR_NAMES:
                raise ConfigError(f"RedactionPolicy: extra detector {name!r} is a built-in name")
            try:
                re.compile(pattern)
            except re.error as e:
                raise ConfigError(f"RedactionPolicy: extra detector {name!r}: {e}") from e
        object.__setattr__(self, "style", style_named(self.style, "RedactionPolicy.style"))
        object.__setattr__(
            self,
            "styles",
            {k: style_named(v, f"RedactionPolicy.styles[{k!r}]") for k, v in self.styles.items()},
        )
        object.__setattr__(
            self, "fields", {k: rule_named(v, f"RedactionPolicy.fields[{k!r}]") for k, v in
                             self.fields.items()},
        )  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RedactionPolicy:
        """A policy from plain data (the keys are the field names of this class).

        Raises:
            ConfigError: an unknown key, detector, style or rule.
        """
        known = {"detectors", "style", "styles", "extra", "fields", "secret", "secrets"}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(
                f"redaction policy: unknown key(s) {sorted(unknown)}; use {sorted(known)}"
            )
        return cls(**data)

    @classmethod
    def from_file(cls, path: Path | str) -> RedactionPolicy:
        """A policy from a JSON file holding an object (see `from_dict`).

        Raises:
            ConfigError: the file cannot be read, is not a JSON object, or names unknown keys.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ConfigError(f"cannot read the redaction policy {path}: {e}") from e
        if not isinstance(data, dict):
            raise ConfigError(f"redaction policy {path}: expected a JSON object")
        return cls.from_dict(data)


_PROCESS_SECRET = secrets.token_bytes(32)


def _installation_secret(policy: RedactionPolicy) -> tuple[bytes, bool]:
    """The key pseudonyms are made with, and whether it is stable across runs."""
    configured = policy.secret if policy.secret is not None else os.environ.get(SECRET_ENV)
    if configured:
        return (configured.encode() if isinstance(configured, str) else configured), True
    master = os.environ.get(MASTER_KEY_ENV)
    if master:
        return hmac.new(master.encode(), b"frontdesk redaction pseudonyms", "sha256").digest(), True
    return _PROCESS_SECRET, False


# -- the redactor --------------------------------------------------------------------------

_DIGITS_ONLY = re.compile(r"\d{7,}")
_PSEUDONYM = re.compile(r"\[pseudonym:[0-9a-f]{16}\]")
# What `masking.scrub` looks for needs one of these (a URL, a query parameter, a key, a
# bearer token): texts without any skip it.
_SECRET_HINT = re.compile(r"(?i)://|=|sk-|bearer")
CACHE_CHARS = 4_000_000
"""How many characters of redacted texts a `Redactor` remembers (then it starts over)."""


class Redactor:
    """Applies a `RedactionPolicy` to texts and to JSON payloads.

    Args:
        policy: what to redact and how (default: every built-in detector, `label` style).
    """

    def __init__(self, policy: RedactionPolicy | None = None) -> None:
        self.policy = policy or RedactionPolicy()
        self._detectors: list[Detector] = [
            d for d in BUILTIN if d.name in set(self.policy.detectors)
        ] + [Detector.regex(name, pattern) for name, pattern in self.policy.extra.items()]
        self._secret, self.stable_pseudonyms = _installation_secret(self.policy)
        # The same texts come back again and again (a thread is in every attempt's messages
        # and wire body), so each is redacted once.
        self._seen: dict[tuple[str, str | None], str] = {}
        self._seen_chars = 0

    def pseudonym(self, value: str, *, user_id: str | None) -> str:
        """A stable token for `value`: the same for one user and value, different across users.

        It is an HMAC keyed with a per-user key (itself an HMAC of the user id with the
        installation secret), so nobody without the secret can test a guess.
        """
        user_key = hmac.new(self._secret, b"user:" + (user_id or "").encode(), "sha256").digest()
        digest = hmac.new(user_key, value.encode("utf-8", "surrogatepass"), hashlib.sha256)
        return f"[pseudonym:{digest.hexdigest()[:16]}]"

    def findings(self, text: str) -> list[tuple[str, Span]]:
        """What the detectors find in `text`: (detector name, span), in text order.

        Where two detectors overlap, the earlier one in priority order wins (an IBAN over
        the account number inside it, a card number over a phone number).
        """
        taken: list[tuple[str, Span]] = []
        for detector in self._detectors:
            for start, end in detector.spans(text):
                if all(end <= s or start >= e for _, (s, e) in taken):
                    taken.append((detector.name, (start, end)))
        return sorted(taken, key=lambda item: item[1])

    def _replace(self, name: str, value: str, user_id: str | None) -> str:
        style = self.policy.styles.get(name, self.policy.style)
        if style == "mask":
            return mask(value)
        if style == "pseudonymise":
            return self.pseudonym(value, user_id=user_id)
        return f"[{name.upper()}]"

    def text(
        self,
        text: str,
        *,
        user_id: str | None = None,
        known: Mapping[str, str] | None = None,
    ) -> str:
        """`text` with every detected value (and every `known` value) replaced.

        Args:
            text: what to show.
            user_id: whose text it is (pseudonyms are per user).
            known: values to replace wherever they appear, with their replacement (the
                ruled fields of the conversation's requests, see `field_values`).
        """
        if known:
            for value in sorted(known, key=len, reverse=True):
                if value in text:
                    text = text.replace(value, known[value])
        key = (text, user_id)
        shown = self._seen.get(key)
        if shown is None:
            shown = self._detected(text, user_id)
            self._seen_chars += len(text)
            if self._seen_chars > CACHE_CHARS:
                self._seen.clear()
                self._seen_chars = len(text)
            self._seen[key] = shown
        return shown

    def _detected(self, text: str, user_id: str | None) -> str:
        found = self.findings(text)
        if found:
            out, last = [], 0
            for name, (start, end) in found:
                out += [text[last:start], self._replace(name, text[start:end], user_id)]
                last = end
            text = "".join([*out, text[last:]])
        return scrub(text) if self.policy.secrets and _SECRET_HINT.search(text) else text

    def value(
        self,
        value: Any,
        *,
        user_id: str | None = None,
        known: Mapping[str, str] | None = None,
    ) -> Any:
        """A JSON value with every string in it redacted (`text`), keys kept.

        A long integer (7 digits or more) is read as text too, so a card number recorded as
        a JSON number is caught (a key is not context: an 8-digit number under an
        `account` key is not taken for an account number).
        """
        if isinstance(value, str):
            return self.text(value, user_id=user_id, known=known)
        if isinstance(value, dict):
            return {k: self.value(v, user_id=user_id, known=known) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v, user_id=user_id, known=known) for v in value]
        if isinstance(value, int) and not isinstance(value, bool):
            if _DIGITS_ONLY.fullmatch(str(value)):
                shown = self.text(str(value), user_id=user_id, known=known)
                return value if shown == str(value) else shown
        return value

    def _rule_for(self, path: str, rules: Mapping[str, Rule]) -> Rule | None:
        fields = self.policy.fields
        leaf = path.rsplit(".", 1)[-1]
        return fields.get(path) or fields.get(leaf) or rules.get(path)

    def _ruled(self, rule: Rule, value: Any, user_id: str | None) -> Any:
        if rule == "keep" or value is None:
            return value
        if isinstance(value, list):
            return [self._ruled(rule, v, user_id) for v in value]
        if isinstance(value, dict):
            return {k: self._ruled(rule, v, user_id) for k, v in value.items()}
        shown = value if isinstance(value, str) else json.dumps(value)
        if rule == "mask":
            return mask(shown)
        if _PSEUDONYM.fullmatch(shown):  # Shown already (a stored, scrubbed request).
            return shown
        return self.pseudonym(shown, user_id=user_id)

    def request(
        self,
        data: Any,
        rules: Mapping[str, Rule] | None = None,
        *,
        user_id: str | None = None,
        known: Mapping[str, str] | None = None,
    ) -> Any:
        """A request payload with its field rules applied, and the detectors run on the rest.

        Args:
            data: the request as recorded (a dict, possibly nested).
            rules: the rules its model declares (`field_rules`), by dotted path; the
                policy's `fields` win over them.
            user_id: whose request it is (pseudonyms are per user).
            known: passed on to `text` for the fields without a rule.
        """
        return self._request(data, rules or {}, user_id, known, "")

    def _request(
        self,
        data: Any,
        rules: Mapping[str, Rule],
        user_id: str | None,
        known: Mapping[str, str] | None,
        path: str,
    ) -> Any:
        if isinstance(data, list):
            return [self._request(v, rules, user_id, known, path) for v in data]
        if not isinstance(data, dict):
            return self.value(data, user_id=user_id, known=known)
        out: dict[str, Any] = {}
        for key, value in data.items():
            here = f"{path}.{key}" if path else key
            rule = self._rule_for(here, rules)
            if rule == "drop":
                continue
            if rule is None:
                out[key] = self._request(value, rules, user_id, known, here)
            else:
                out[key] = self._ruled(rule, value, user_id)
        return out

    def field_values(
        self, data: Any, rules: Mapping[str, Rule] | None = None, *, user_id: str | None = None
    ) -> dict[str, str]:
        """The values of a request's ruled fields (but `keep`), each with its replacement.

        Passed to `text(known=...)`, they are replaced wherever they appear: the user's
        message that held the name marked `pseudonymise` shows the same token as the field.
        """
        return {
            leaf: shown for _, _, leaf, shown in self.ruled_leaves(data, rules, user_id=user_id)
        }

    def ruled_leaves(
        self, data: Any, rules: Mapping[str, Rule] | None = None, *, user_id: str | None = None
    ) -> list[tuple[str, Rule, str, str]]:
        """Each ruled value (but `keep`) of a request, as (field path, rule, value, shown
        form): `drop` is shown `[FIELD]`, `mask` masked, `pseudonymise` as its token. Values
        shorter than `MIN_SUBSTITUTED` characters are left out (they are not searched for
        in free text)."""
        found: list[tuple[str, Rule, str, str]] = []
        self._collect(data, rules or {}, user_id, "", found)
        return found

    def rule_for(self, path: str, rules: Mapping[str, Rule]) -> Rule | None:
        """The rule of the field at dotted `path`: the policy's, else the model's."""
        return self._rule_for(path, rules)

    def ruled(self, rule: Rule, value: Any, user_id: str | None) -> Any:
        """`value` as a `mask` or `pseudonymise` rule shows it (`keep`: as is)."""
        return self._ruled(rule, value, user_id)

    def _collect(
        self, data: Any, rules: Mapping[str, Rule], user_id: str | None, path: str,
        found: list[tuple[str, Rule, str, str]],
    ) -> None:  # fmt: skip
        if isinstance(data, list):
            for item in data:
                self._collect(item, rules, user_id, path, found)
            return
        if not isinstance(data, dict):
            return
        for key, value in data.items():
            here = f"{path}.{key}" if path else key
            rule = self._rule_for(here, rules)
            if rule is None:
                self._collect(value, rules, user_id, here, found)
            elif rule != "keep":
                for leaf in _leaves(value):
                    if len(leaf) < MIN_SUBSTITUTED:
                        continue
                    dropped = rule == "drop"
                    shown = f"[{key.upper()}]" if dropped else self._ruled(rule, leaf, user_id)
                    found.append((here, rule, leaf, shown))


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _leaves(v)]
    if isinstance(value, list):
        return [s for v in value for s in _leaves(v)]
    if value is None or isinstance(value, bool):
        return []
    return [value if isinstance(value, str) else str(value)]


def redactor_of(value: Redactor | RedactionPolicy | None) -> Redactor:
    """A `Redactor` for a policy, a redactor, or the default policy."""
    if isinstance(value, Redactor):
        return value
    return Redactor(value)
