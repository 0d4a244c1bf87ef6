"""Redacted copies of stored audit rows, for the views that show them in clear.

`frontdesk audit show`, the HTML page and the JSONL export pass a conversation's rows
through `redact_rows` before they build anything, so the three show the same thing. The
stored rows are never changed (the chain covers them); a redacted copy's `hash` is the
stored row's, so a redacted export says `"redacted": true` and is verified against the
database, not against itself.

The rules a request model declares travel in its `request` row (`payload["redact"]`, dotted
field path -> rule, recorded with the turn), so the views need no application code.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from frontdesk.audit.chain import canonical_json
from frontdesk.audit.store import StoredAuditEvent
from frontdesk.redaction import Redactor, Rule
from frontdesk.ruled import RuledValues

__all__ = ["RULES_KEY", "recorded_rules", "redact_rows", "ruled_values"]

RULES_KEY = "redact"
"""The key of a `request` payload that holds its model's field rules."""


def _rules(payload: Mapping[str, Any]) -> Mapping[str, Rule]:
    rules = payload.get(RULES_KEY)
    return rules if isinstance(rules, Mapping) else {}


def _request_output(payload: Mapping[str, Any]) -> Any:
    """The request a request expert's attempt returned, if it returned one."""
    output = payload.get("output")
    return output.get("request") if isinstance(output, Mapping) else None


class _Conversation:
    """What redacting one conversation's rows needs: its users, its rules and the values of
    its ruled fields (to replace them in free text too)."""

    def __init__(
        self,
        rows: Sequence[StoredAuditEvent],
        redactor: Redactor,
        ruled: RuledValues | None = None,
    ) -> None:
        self.redactor = redactor
        self.users: dict[str, str | None] = {}
        self.rules: dict[str, Mapping[str, Rule]] = {}
        owner: str | None = None
        for row in rows:
            if row.kind == "turn_started":
                self.users[row.turn_id] = row.payload.get("user_id")
                owner = owner or row.payload.get("user_id")
            elif row.kind == "request" and _rules(row.payload):
                self.rules[row.turn_id] = _rules(row.payload)
        self.owner = owner
        self.known: dict[str | None, dict[str, str]] = {}
        for row in rows:
            if row.kind == "request":
                self._learn(row, row.payload.get("request"))
            elif row.kind == "model_attempt" and row.payload.get("expert") == "request":
                self._learn(row, _request_output(row.payload))
        if ruled:  # The user's values kept from any conversation, found again here.
            for row in rows:
                found = ruled.found(json.dumps(row.payload, ensure_ascii=False))
                if found:
                    self.known.setdefault(self.user(row), {}).update(found)

    def user(self, row: StoredAuditEvent) -> str | None:
        return self.users.get(row.turn_id, self.owner)

    def rules_of(self, row: StoredAuditEvent) -> Mapping[str, Rule]:
        return self.rules.get(row.turn_id, {})

    def _learn(self, row: StoredAuditEvent, request: Any) -> None:
        if request is None:
            return
        user = self.user(row)
        values = self.redactor.field_values(request, self.rules_of(row), user_id=user)
        self.known.setdefault(user, {}).update(values)

    def payload(self, row: StoredAuditEvent) -> dict[str, Any]:
        user, rules = self.user(row), self.rules_of(row)
        known = self.known.get(user, {})
        r = self.redactor
        p = dict(row.payload)
        special: dict[str, Any] = {}
        if row.kind == "request" and "request" in p:
            special["request"] = r.request(p.pop("request"), rules, user_id=user, known=known)
        elif row.kind == "model_attempt" and _request_output(p) is not None:
            output = dict(p.pop("output"))
            request = r.request(output.pop("request"), rules, user_id=user, known=known)
            special["output"] = {**r.value(output, user_id=user, known=known), "request": request}
        shown: dict[str, Any] = r.value(p, user_id=user, known=known)
        shown.update(special)
        return shown


def redact_rows(
    rows: Sequence[StoredAuditEvent],
    redactor: Redactor | None = None,
    *,
    ruled: RuledValues | None = None,
) -> list[StoredAuditEvent]:
    """Copies of one conversation's rows (in seq order) as a clear-text view shows them.

    Every string of every payload goes through `redactor` (the default policy when `None`);
    a `request` row's request, and the request a request expert returned, get their model's
    field rules. The system prompt texts are redacted too (a prompt may carry memories).

    Args:
        rows: the stored rows of one conversation.
        redactor: the policy to apply.
        ruled: the conversation owner's ruled values kept from every conversation of
            theirs (`frontdesk.ruled`): found and replaced here too, so a value said in
            another conversation is redacted in this one.

    Returns:
        New rows with the redacted payload; `prev_hash` and `hash` are the stored row's.
        They hold no blob values and no opener: their payload is the expanded, redacted
        one, so nothing unredacted is carried along with them.
    """
    redactor = redactor or Redactor()
    conversation = _Conversation(rows, redactor, ruled)
    prompts: dict[str, str] = {}
    out = []
    for row in rows:
        system = row.system_prompt
        if system is not None:
            if system not in prompts:
                shown = redactor.text(system, user_id=conversation.user(row))
                prompts[system] = shown if ruled is None else ruled.text(shown)
            system = prompts[system]
        payload_json = canonical_json(conversation.payload(row))
        out.append(
            dataclasses.replace(
                row, payload_json=payload_json, system_prompt=system, blobs=None, opener=None
            )
        )
    return out


def ruled_values(rows: Sequence[StoredAuditEvent], redactor: Redactor) -> dict[str, str]:
    """The values of one conversation's ruled request fields, each with what it is shown as
    (for `Redactor.text(known=...)` on texts built from these rows elsewhere)."""
    found: dict[str, str] = {}
    for values in _Conversation(rows, redactor).known.values():
        found.update(values)
    return found


def recorded_rules(rows: Sequence[StoredAuditEvent]) -> dict[str, Rule]:
    """The field rules recorded in one conversation's `request` rows, merged (dotted path ->
    rule; a later turn's rule for the same path wins)."""
    merged: dict[str, Rule] = {}
    for row in rows:
        if row.kind == "request":
            merged.update(_rules(row.payload))
    return merged
