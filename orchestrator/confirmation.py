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

A request with ruled fields (`Redact`) is held as people may see it (`[PIN]`, masked):
the asking turn scrubs its message like any other turn (`scrub_secrets`), and the values
the handler will need are kept apart (`hold`), sealed under the user's data key when a
master key is set (`AuditLog.seal_for_user`: unreadable at rest, gone with the user's
erasure), in clear beside the shown request without one (as the audit then holds them
too). They are opened only on the "yes" (`answer`), and dropped from the stored record
once the handler's outcome is stored or the customer said no (`released`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from frontdesk.audit.store import AuditLog
from frontdesk.experts import Category, NeedMoreInfo, Outcome
from frontdesk.orchestrator._recorder import TurnRecorder, jsonable
from frontdesk.orchestrator.ruled_values import model_of
from frontdesk.redaction import field_rules, mask
from frontdesk.ruled import TurnSecrets
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


def _bound(conversation_id: str, asked_in: str) -> bytes:
    """What a sealed held request is bound to (it cannot be moved to another turn)."""
    return f"confirmation\x00{conversation_id}\x00{asked_in}".encode("utf-8", "surrogatepass")


@dataclass(frozen=True, kw_only=True)
class Keeper:
    """What holding a request's ruled values needs: the turn's user and conversation, how
    its values are found (`Secrets.of_turn`), and the audit log whose per-user keys seal
    them (`None`: no audit log; without a master key it seals nothing)."""

    vault: AuditLog | None
    user_id: str | None
    conversation_id: str
    secrets_of: Callable[[BaseModel], TurnSecrets | None]


async def hold(
    asked: Asked, request: BaseModel | None, keeper: Keeper | None, *, asked_in: str
) -> Asked:
    """`asked` with its request's ruled values out of what is stored in clear: the record
    keeps the request as shown (`[PIN]`), the question and reply with the values replaced,
    and the values themselves under `held` (sealed by the vault, the audit log's per-user
    keys, when it has a master key); unchanged for a request without ruled values."""
    secrets = None if keeper is None or request is None else keeper.secrets_of(request)
    if secrets is None or keeper is None or request is None:
        return asked
    vault = keeper.vault
    full = jsonable(request)
    shown = secrets.request
    values = {k: v for k, v in full.items() if not isinstance(shown, Mapping) or shown.get(k) != v}
    sealed = None
    if vault is not None:
        bound = _bound(keeper.conversation_id, asked_in)
        sealed = await vault.seal_for_user(keeper.user_id, values, bound)
    record = {
        **asked.record,
        "request": shown,
        "question": secrets.text(str(asked.record["question"])),
        "held": {"sealed": sealed} if sealed is not None else {"clear": values},
    }
    reply = asked.outcome.reply
    outcome = asked.outcome.model_copy(
        update={
            "instruction": secrets.text(asked.outcome.instruction),
            "reply": None if reply is None else secrets.text(reply),
        }
    )
    return Asked(outcome=outcome, record=record)


async def _restored(pending: Pending, keeper: Keeper | None) -> dict[str, Any] | None:
    """The pending request with its held values back (`None`: they cannot be opened, the
    user's key was destroyed or the audit log is gone)."""
    data = dict(pending.record["request"])
    held = pending.record.get("held")
    if not held:
        return data
    if "clear" in held:
        return {**data, **held["clear"]}
    if keeper is None or keeper.vault is None:
        return None
    bound = _bound(keeper.conversation_id, pending.asked_in)
    opened = await keeper.vault.open_for_user(held["sealed"], bound)
    return None if opened is None else {**data, **opened}


def released(record: Mapping[str, Any]) -> dict[str, Any]:
    """A confirmation record without the values it held for the handler."""
    return {k: v for k, v in record.items() if k != "held"}


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
    asked_in: str = ""
    """The turn that asked (on "yes": its record is `released` once the outcome is stored)."""
    release: dict[str, Any] | None = None
    """On "yes" with held values: the asking turn's record without them, written once the
    handler's outcome is stored (a retry then reuses that outcome, needing none)."""


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
    keeper: Keeper | None = None,
) -> Answered | None:
    """The customer's message read against `pending`; `None` for a correction (or a
    category no longer registered): the turn runs as usual. `keeper` opens the values the
    request held (`hold`), and holds them again when it is asked about anew."""
    spec = categories.get(pending.category)
    said = answer_of(text)
    if spec is None or spec.request is None or said is None:
        recorder.note(
            "confirmation", status="corrected", category=pending.category, asked_in=pending.asked_in
        )
        return None
    base = {"category": pending.category, "asked_in": pending.asked_in}
    data = await _restored(pending, keeper) if said == "yes" else None
    if said == "yes" and data is None:  # Its values cannot be opened: asked for anew.
        recorder.note("confirmation", status="expired", **base)
        return Answered(
            category=pending.category,
            request=spec.request.model_construct(),
            run=False,
            outcome=Outcome(
                instruction="Tell the customer the request can no longer be completed and"
                " nothing was done; ask them to make it again."
            ),
            record={"status": "expired", **base},
        )
    request = model_of(spec.request, data if data is not None else pending.record["request"])
    if said == "no":
        recorder.note("confirmation", status="declined", **base)
        if pending.record.get("held") and pending.record.get("status") == "pending":
            declined = {**released(pending.record), "status": "declined"}
            await store.answer_confirmation(pending.asked_in, declined, lease=lease)
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
        asked = await hold(asked, request, keeper, asked_in=turn_id)
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
        asked_in=pending.asked_in,
        release=released(confirmed) if "held" in confirmed else None,
    )


def awaiting(record: Mapping[str, Any] | None) -> str | None:
    """The question of a turn that asked for confirmation (`Reply.confirmation`)."""
    if record and record.get("status") == "pending":
        return str(record.get("question") or "")
    return None
