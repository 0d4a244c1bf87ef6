"""A request in progress: a category's request that still misses fields, kept with the
conversation until it is complete, cancelled or expired (`Reply.pending`).

The turn that asks for missing fields stores the request in progress on its own outcome
(`TurnOutcome.flow["pending"]`: the category, the fields known so far, what is missing,
when it was started); the next turn's start reads it with the category of the turn before
(the same primary-key read), so a plain turn pays nothing for it. That next turn reads the
customer's message against it (`route`):

    cancel      "cancel", "forget it", "never mind": it is cleared, nothing runs
                (`Reply.cancelled`); the next message is triaged afresh
    resume      "yes, carry on" after the bot offered to resume it (a digression): the
                request expert extracts it again with the fields known so far
    progress    the request expert, run first and without triage, fills a missing field
                or changes a known one (an answer, a correction): the turn stays in the
                category; a changed field is in `HandlerContext.corrected`
    digression  otherwise triage routes the message; another category (or an OTHER
                question) is answered, and the reply offers to resume the request in
                progress, which is carried on to the next turn
    expired     older than `pending_ttl` (30 minutes): forgotten, the message is triaged

Every step is audited (`pending` events). Cancel and resume are read by rule, from fixed
word lists, never by a model. The request in progress goes to the experts as a labelled
block in the last user turn, like the memory blocks: never a turn of the thread.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from frontdesk.experts import Category, MemoryBlock, NeedMoreInfo
from frontdesk.orchestrator._recorder import jsonable
from frontdesk.redaction import field_rules, mask
from frontdesk.threads.models import utcnow

DEFAULT_TTL = dt.timedelta(minutes=30)
"""How long a request in progress waits for the customer to come back to it."""

Said = Literal["cancel", "resume"]

_CANCEL = {
    "cancel", "cancel it", "cancel that", "cancel this", "cancel the request", "cancel please",
    "please cancel", "forget it", "forget that", "forget about it", "never mind", "nevermind",
    "never mind that", "no never mind", "oh never mind", "scrap that", "scrap it", "stop",
    "don't bother", "dont bother", "no forget it", "actually forget it", "actually never mind",
    "actually cancel that", "i changed my mind", "i've changed my mind", "ive changed my mind",
    # Welsh, Spanish, Hindi (the languages the tests speak).
    "canslo", "anghofia fe", "dim ots", "cancelar", "olvídalo", "olvidalo", "da igual",
    "रद्द करो", "रहने दो", "छोड़ो",
}  # fmt: skip
_RESUME = {
    "yes", "yes please", "yes carry on", "carry on", "yes continue", "continue", "go on",
    "yes go on", "ok carry on", "okay carry on", "sure", "ok", "okay", "yes let's carry on",
    "let's carry on", "lets carry on", "yes lets carry on", "resume", "back to it",
    "yes back to it", "yes please carry on", "please carry on", "yeah carry on", "yep",
    "yeah", "let's continue", "lets continue", "yes let's continue",
    "ie", "ie parhau", "sí", "si", "sí continuar", "sí sigamos", "हाँ", "हां", "जारी रखें",
}  # fmt: skip
_PUNCTUATION = re.compile(r"[^\w\s']+")


def said(text: str) -> Said | None:
    """ "cancel" or "resume" when the whole message is one (any case, punctuation and
    spaces aside); `None` for anything else."""
    words = " ".join(_PUNCTUATION.sub(" ", text.casefold().replace("’", "'")).split())
    if words in _CANCEL:
        return "cancel"
    if words in _RESUME:
        return "resume"
    return None


@dataclass(frozen=True, kw_only=True)
class InProgress:
    """A request that still misses fields (stored as `TurnOutcome.flow["pending"]`)."""

    category: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    """The fields the customer has given so far (JSON values)."""
    missing: tuple[str, ...] = ()
    question: str = ""
    """The question that asked for them."""
    started_at: dt.datetime
    started_in: str
    """The user message id of the turn that started it."""
    offered: bool = False
    """The bot offered to resume it after a digression (a "yes" resumes it)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "fields": dict(self.fields),
            "missing": list(self.missing),
            "question": self.question,
            "started_at": self.started_at.isoformat(),
            "started_in": self.started_in,
            "offered": self.offered,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InProgress:
        return cls(
            category=str(data["category"]),
            fields=dict(data.get("fields") or {}),
            missing=tuple(data.get("missing") or ()),
            question=str(data.get("question") or ""),
            started_at=dt.datetime.fromisoformat(str(data["started_at"])),
            started_in=str(data.get("started_in") or ""),
            offered=bool(data.get("offered")),
        )


def carried(flow: Mapping[str, Any] | None) -> InProgress | None:
    """The request in progress the turn before left, if any."""
    record = None if flow is None else flow.get("pending")
    return None if not record else InProgress.from_json(record)


def held(asked: Any) -> InProgress:
    """A request held for the customer's yes (`confirmation.Pending`) as a request in
    progress with nothing missing: a message that corrects it goes through the same path
    (the request expert, without triage, with the held fields in view)."""
    return InProgress(
        category=asked.category,
        fields=dict(asked.record.get("request") or {}),
        started_at=asked.asked_at,
        started_in=asked.asked_in,
    )


def expired(request: InProgress, ttl: dt.timedelta, now: dt.datetime | None = None) -> bool:
    """Whether `request` was started longer than `ttl` ago."""
    return (now or utcnow()) - request.started_at > ttl


def started(
    category: str,
    missing: NeedMoreInfo,
    known: Mapping[str, Any],
    *,
    turn_id: str,
    before: InProgress | None,
) -> InProgress:
    """The request in progress a turn that asks for `missing` leaves: `before` carried on
    (its start kept, its fields updated) when it is the same category, else a new one."""
    same = before is not None and before.category == category
    fields = {**(before.fields if before is not None and same else {}), **jsonable(dict(known))}
    return InProgress(
        category=category,
        fields={k: v for k, v in fields.items() if k not in missing.missing},
        missing=tuple(missing.missing),
        question=missing.question,
        started_at=before.started_at if before is not None and same else utcnow(),
        started_in=before.started_in if before is not None and same else turn_id,
    )


def progressed(
    request: InProgress,
    extracted: BaseModel | None,
    missing: NeedMoreInfo | None,
    known: Mapping[str, Any],
) -> bool:
    """Whether an extraction made with `request` in view moved it on: complete now, fewer
    fields missing, or a known field given or changed (the message answers the question,
    or corrects an answer)."""
    if extracted is not None:
        return True
    if missing is None:
        return False
    if set(missing.missing) < set(request.missing) or not set(missing.missing):
        return True
    now = jsonable(dict(known))
    return any(request.fields.get(k) != v for k, v in now.items())


def corrected(
    before: Mapping[str, Any], request: BaseModel | None, known: Mapping[str, Any] = {}
) -> frozenset[str]:
    """The fields known `before` whose value the customer changed since
    (`HandlerContext.corrected`)."""
    now = dict(jsonable(dict(known)))
    if request is not None:
        now.update(request.model_dump(mode="json"))
    return frozenset(k for k, v in before.items() if k in now and now[k] != v)


def completed(
    model: type[BaseModel] | None, before: Mapping[str, Any], known: Mapping[str, Any]
) -> BaseModel | None:
    """The request built from the fields known before and now, when they are all it needs
    (a resumed request whose extraction still lists a field the customer gave earlier)."""
    if model is None or not (before or known):
        return None
    try:
        return model.model_validate({**before, **jsonable(dict(known))})
    except ValidationError:
        return None


def block(request: InProgress, categories: Mapping[str, Category]) -> MemoryBlock:
    """The request in progress as a labelled block for the experts (in the last user turn,
    like the memory blocks: context, not a turn). A field ruled `drop` or `pseudonymise`
    (`Redact`) is left out, one ruled `mask` shown masked."""
    spec = categories.get(request.category)
    rules = {} if spec is None or spec.request is None else field_rules(spec.request)
    shown = []
    for name, value in request.fields.items():
        rule = rules.get(name, "keep")
        if rule in ("drop", "pseudonymise"):
            continue
        shown.append(f"{name} = {mask(str(value)) if rule == 'mask' else _quoted(value)}")
    lines = [
        "<<request in progress: what the bot has recorded of this conversation, not the"
        " customer's words>>",
        f"category: {request.category}",
        "known so far: " + ("; ".join(shown) if shown else "nothing yet"),
        "still missing: " + (", ".join(request.missing) or "nothing"),
        "The customer may give a missing field, or correct a known one (the newest value counts).",
        "<<end of request in progress>>",
    ]
    return MemoryBlock(text="\n".join(lines), ids=())


def _quoted(value: Any) -> str:
    text = " ".join(str(value).split())[:200].replace("<<", "‹‹").replace(">>", "››")
    return f'"{text}"' if isinstance(value, str) else text


def joined(*blocks: MemoryBlock | None) -> MemoryBlock | None:
    """Several labelled blocks as one (memory first)."""
    kept = [b for b in blocks if b is not None and b.text]
    if not kept:
        return None
    ids: Sequence[str] = tuple(i for b in kept for i in b.ids)
    return MemoryBlock(text="\n\n".join(b.text for b in kept), ids=tuple(ids))


def describe(request: InProgress, categories: Mapping[str, Category]) -> str:
    """The request in customer words: its category's description and what is known."""
    spec = categories.get(request.category)
    what = spec.description if spec is not None else request.category.replace("_", " ").lower()
    rules = {} if spec is None or spec.request is None else field_rules(spec.request)
    known = [
        f"{k.replace('_', ' ')} {v}"
        for k, v in request.fields.items()
        if rules.get(k, "keep") == "keep"
    ]
    return what + (f" ({', '.join(known)})" if known else "")


def offer(request: InProgress, categories: Mapping[str, Category]) -> str:
    """The sentence a digression's instruction ends with: offer to resume."""
    return (
        f"\n\nThen ask whether they want to carry on with their earlier request, which is"
        f" not finished: {describe(request, categories)}; still needed:"
        f" {', '.join(m.replace('_', ' ') for m in request.missing) or 'nothing'}."
    )


def cancelled_instruction(request: InProgress, categories: Mapping[str, Category]) -> str:
    return (
        "Tell the customer their unfinished request was cancelled as they asked and nothing"
        f" was done: {describe(request, categories)}. Ask if there is anything else."
    )
