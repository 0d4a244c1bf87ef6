"""Confirmation: a `Category(confirm=...)` handler runs only after the customer says yes.

The turn that completes such a request does not run the handler: it stores the request as
pending on its own outcome (`TurnOutcome.confirmation`) and asks the confirmation question.
The next turn's start reads that outcome with the category of the turn before (the same
primary-key read, so a plain turn pays nothing), and this module reads the customer's
message as

    yes         the handler runs once, with the pending request (no triage, no extraction);
                the pending request is marked answered first, so no other branch (an edit
                of the "yes") runs it again, and a retry reuses the stored outcome
    no          nothing runs; the customer hears that nothing was done
    expired     a yes past `confirm_ttl`: the same request is asked about again
    anything    a correction: the turn runs as usual (triage, extraction), which asks again
    else        for a `confirm` category

Each step is audited (`confirmation` events: asked, confirmed, declined, expired,
corrected). "Yes" and "no" are read by rule, never by a model: a model that misreads a
message must not be able to move money.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from frontdesk.experts import Category, NeedMoreInfo, Outcome
from frontdesk.orchestrator._recorder import TurnRecorder, jsonable
from frontdesk.redaction import field_rules, mask
from frontdesk.threads.models import utcnow
from frontdesk.threads.store import ConversationStore, Previous, TurnLease

DEFAULT_TTL = dt.timedelta(minutes=15)
"""How long a pending request waits for the customer's yes (`confirm_ttl`)."""

Answer = Literal["yes", "no"]

_YES = {
    "yes", "y", "yeah", "yep", "yup", "yes please", "yes confirm", "confirm", "confirmed",
    "i confirm", "go ahead", "yes go ahead", "do it", "please do", "proceed", "ok", "okay",
    "sure", "correct", "that's right", "thats right", "yes that's right", "approve",
}  # fmt: skip
_NO = {
    "no", "n", "nope", "nah", "no thanks", "no thank you", "cancel", "cancel it", "stop",
    "don't", "dont", "do not", "no don't", "no dont", "decline", "abort", "no cancel",
    "no cancel it", "never mind", "nevermind",
}  # fmt: skip
_PUNCTUATION = re.compile(r"[^\w\s']+")


def answer_of(text: str) -> Answer | None:
    """ "yes" or "no" when the whole message is one (any case, punctuation and spaces
    aside); `None` for anything else, which is read as a correction."""
    said = " ".join(_PUNCTUATION.sub(" ", text.casefold().replace("’", "'")).split())
    if said in _YES:
        return "yes"
    if said in _NO:
        return "no"
    return None


@dataclass(frozen=True, kw_only=True)
class Pending:
    """A request waiting for the customer's answer (the turn before asked about it)."""

    asked_in: str
    """The user message id of the turn that asked."""
    record: Mapping[str, Any]
    """Its stored `TurnOutcome.confirmation`."""

    @property
    def category(self) -> str:
        return str(self.record["category"])

    @property
    def asked_at(self) -> dt.datetime:
        return dt.datetime.fromisoformat(str(self.record["asked_at"]))


def pending_of(previous: Previous | None, turn_id: str) -> Pending | None:
    """The request the turn before left waiting, if this turn may answer it: still
    pending, or confirmed by this very turn (its retry, after a crash in the handler)."""
    if previous is None or not previous.confirmation:
        return None
    record = previous.confirmation
    status = record.get("status")
    if status == "pending" or (status == "confirmed" and record.get("by") == turn_id):
        return Pending(asked_in=previous.user_message_id, record=record)
    return None


@dataclass(frozen=True, kw_only=True)
class Asked:
    """The outcome of a turn that asks the customer to confirm `request`."""

    outcome: Outcome
    record: dict[str, Any]
    """Stored as the turn's `TurnOutcome.confirmation` (status `pending`)."""


def ask(
    categories: Mapping[str, Category],
    recorder: TurnRecorder,
    category: str,
    request: BaseModel | None,
    missing: NeedMoreInfo | None,
    *,
    again: str | None = None,
) -> Asked | None:
    """For a `confirm` category's complete request, the question instead of the handler;
    `None` for anything else (the handler, or the built-in route, decides)."""
    spec = categories.get(category)
    if spec is None or spec.confirm is False or request is None or missing is not None:
        return None
    if callable(spec.confirm):
        question = spec.confirm(request)
        if not isinstance(question, str) or not question.strip():
            raise TypeError(
                f"category {category!r}: confirm= returned {question!r}; it must return the"
                " confirmation question as a non-empty str"
            )
        outcome = Outcome(instruction=f"Ask the customer: {question}", reply=question)
    else:
        question = default_question(category, request)
        before = f"{again} " if again else ""
        outcome = Outcome(
            instruction=(
                f"{before}Ask the customer to confirm this request before anything is done,"
                f" giving exactly these details: {question} They answer yes or no."
            )
        )
    record = {
        "status": "pending",
        "category": category,
        "request": jsonable(request),
        "question": question,
        "asked_at": utcnow().isoformat(),
    }
    recorder.note("confirmation", status="asked", category=category, question=question)
    return Asked(outcome=outcome, record=record)


def default_question(category: str, request: BaseModel) -> str:
    """The request's fields as one question ("Please confirm: transfer, amount 5000,
    account number ****8888. Shall I go ahead?"); a field ruled `drop` or `pseudonymise`
    (`Redact`) is left out, one ruled `mask` shows its last four characters."""
    rules = field_rules(type(request))
    parts = []
    for name, value in request.model_dump(mode="json").items():
        rule = rules.get(name, "keep")
        if value is None or rule in ("drop", "pseudonymise"):
            continue
        shown = mask(str(value)) if rule == "mask" else str(value)
        parts.append(f"{name.replace('_', ' ')} {shown}")
    what = category.replace("_", " ").lower()
    listed = f": {what}, " + ", ".join(parts) if parts else f": {what}"
    return f"Please confirm{listed}. Shall I go ahead?"


@dataclass(frozen=True, kw_only=True)
class Answered:
    """What the customer's answer to a pending request decided (`answer`)."""

    category: str
    request: BaseModel
    run: bool
    """Yes: run the handler with `request`."""
    outcome: Outcome | None = None
    """No or expired: the reply's outcome (the handler does not run)."""
    record: dict[str, Any]
    """This turn's own `TurnOutcome.confirmation`."""


async def answer(
    store: ConversationStore,
    categories: Mapping[str, Category],
    recorder: TurnRecorder,
    pending: Pending,
    text: str,
    *,
    turn_id: str,
    lease: TurnLease,
    ttl: dt.timedelta,
    now: Callable[[], dt.datetime] = utcnow,
) -> Answered | None:
    """The customer's message read against `pending`; `None` for a correction (or a
    category no longer registered): the turn runs as usual."""
    spec = categories.get(pending.category)
    said = answer_of(text)
    if spec is None or spec.request is None or said is None:
        recorder.note(
            "confirmation", status="corrected", category=pending.category, asked_in=pending.asked_in
        )
        return None
    request = spec.request.model_validate(pending.record["request"])
    base = {"category": pending.category, "asked_in": pending.asked_in}
    if said == "no":
        recorder.note("confirmation", status="declined", **base)
        outcome = Outcome(
            instruction=(
                "Tell the customer their request was cancelled as they asked and nothing was"
                " done. Ask if there is anything else."
            )
        )
        return Answered(
            category=pending.category,
            request=request,
            run=False,
            outcome=outcome,
            record={"status": "declined", **base},
        )
    if pending.record.get("status") == "pending" and now() - pending.asked_at > ttl:
        recorder.note("confirmation", status="expired", **base)
        asked = ask(
            categories,
            recorder,
            pending.category,
            request,
            None,
            again="The customer's earlier confirmation came too late and nothing was done.",
        )
        assert asked is not None, "a pending request's category confirms"
        return Answered(
            category=pending.category,
            request=request,
            run=False,
            outcome=asked.outcome,
            record=asked.record,
        )
    # Marked answered before the handler runs: no other branch finds it pending again.
    confirmed = {**pending.record, "status": "confirmed", "by": turn_id}
    if pending.record.get("status") == "pending":
        await store.answer_confirmation(pending.asked_in, confirmed, lease=lease)
    recorder.note("confirmation", status="confirmed", **base)
    return Answered(
        category=pending.category,
        request=request,
        run=True,
        record={"status": "confirmed", **base},
    )


def awaiting(record: Mapping[str, Any] | None) -> str | None:
    """The question of a turn that asked for confirmation (`Reply.confirmation`)."""
    if record and record.get("status") == "pending":
        return str(record.get("question") or "")
    return None
