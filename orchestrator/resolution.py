"""Did it help: the customer's rating, the assume sweep, and the prompt variant of a
conversation (docs/outcomes.md).

A conversation's resolution changes inside the writes that cause it (`threads/resolution.py`
says where); this module holds what the orchestrator adds: `feedback` (a customer rates a
bot answer: stored, audited, counted; a positive rating resolves the conversation by the
customer), the periodic job `conversations.assume_resolved` (no customer message for
`assume_after` after a bot answer: `assumed_resolved`, or `abandoned` when the customer
left mid-request), `closed_by_customer` (the response expert judged that the customer's
message closed the conversation: resolved by the customer in the turn's own last
transaction), and `variant_of` (the stable choice of a prompt variant).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import timedelta

import structlog

from frontdesk import metrics
from frontdesk.audit.events import AuditEvent
from frontdesk.errors import ConfigError, UserError
from frontdesk.experts import Outcome
from frontdesk.experts.response import ResponseResult
from frontdesk.jobs.runner import PeriodicJob
from frontdesk.orchestrator._recorder import TurnRecorder
from frontdesk.orchestrator.audited import Records, audited
from frontdesk.threads.models import utcnow
from frontdesk.threads.resolution import Feedback, ResolutionStore
from frontdesk.threads.store import MessageRecord

log = structlog.get_logger("frontdesk.orchestrator")

__all__ = [
    "ASSUME_AFTER",
    "ASSUMED",
    "Variants",
    "assume_job",
    "closed_by_customer",
    "feedback",
    "variant_of",
]

ASSUME_AFTER = 24 * 3600.0
"""Seconds without a customer message after a bot answer before the conversation is
taken as resolved (Intercom's "assumed" resolution: 24 h)."""
ASSUMED = "conversations.assume_resolved"
"""The periodic job that assumes the quiet conversations resolved."""
VARIANT_EXPERTS = ("triage", "response")
"""The experts whose prompt can have variants (one prompt each per orchestrator)."""


def closed_by_customer(recorder: TurnRecorder, outcome: Outcome, answer: ResponseResult) -> bool:
    """Whether the turn resolves its conversation by the customer: the response expert
    judged that the customer's message closed it ("that's all, thanks": it ended its reply
    with the closing tag, `ResponseResult.closes`). The judgement is audited with the turn
    (`resolution`, by `customer`, judged by `response`); the turn's last transaction then
    writes it (`ConversationStore.finish_turn(closes=True)`: no write on any other turn).
    A handler that resolved it in the same turn, or a hand-off it opened, comes first. A
    tag the expert may have copied from what it was sent (`ResponseResult.echoed`: the
    customer wrote it, or asked for it in words a handler quoted) is the customer's word,
    not a judgement: audited as `resolution_refused`, the conversation stays as it is."""
    if answer.echoed:
        recorder.note(
            "resolution_refused",
            by="customer",
            judged_by="response",
            why="the closing tag was in what the response expert was sent",
        )
        return False
    if not answer.closes or outcome.resolves or outcome.handoff is not None:
        return False
    recorder.note("resolution", resolution="resolved", by="customer", judged_by="response")
    return True


def assume_seconds(value: float | timedelta) -> float:
    """`assume_after=` in seconds.

    Raises:
        ConfigError: not a positive number of seconds.
    """
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
        raise ConfigError(f"assume_after must be > 0 seconds (or a timedelta), got {value!r}")
    return float(seconds)


def sweep_every(assume_after: float) -> int:
    """How often the sweep looks: every second for a short `assume_after` (tests), else
    every minute (a day's wait does not need a finer tick)."""
    return 1 if assume_after < 120 else 60


async def feedback(
    p: Records,
    message: MessageRecord,
    rating: int,
    *,
    user_id: str | None,
    comment: str | None,
) -> Feedback:
    """Store a customer's rating of a bot answer (replacing an earlier one), audited in
    the conversation's chain in the same transaction where the log shares the database.

    Raises:
        UserError: `message` is not a bot answer.
        InvalidInput: the rating is not 1-5, or the comment is not storable text.
    """
    if message.role != "assistant" or message.kind != "message":
        raise UserError(f"message {message.id} is not an answer to rate; rate an assistant message")
    store = ResolutionStore(p.store.engine)
    turn_id = message.parent_id or message.id

    def events(fb: Feedback) -> list[AuditEvent]:
        payload = {
            "message_id": fb.message_id,
            "rating": fb.rating,
            "comment": fb.comment,
            "resolved": fb.resolved,
        }
        return [AuditEvent(kind="feedback", turn_id=turn_id, payload=payload)]

    fb = await audited(
        p,
        message.conversation_id,
        lambda also: store.rate(
            message.id, message.conversation_id, user_id, rating, comment, also=also
        ),
        events,
        lambda _: user_id,
    )
    variant = (message.prompt_versions or {}).get("variant", "")  # Stamped on the answer.
    metrics.feedback(fb.rating, str(variant))
    return fb


def assume_job(p: Records, assume_after: float) -> PeriodicJob:
    """`conversations.assume_resolved`: one UPDATE over the open conversations whose last
    bot answer is older than `assume_after` (derived from the rows, so a missed tick is
    caught up by the next); each change audited as a `resolution` event."""
    store = ResolutionStore(p.store.engine)

    async def sweep() -> None:
        changed = await store.assume(utcnow() - timedelta(seconds=assume_after))
        if not changed or p.audit is None:
            return
        for conversation_id, resolution, user_id in changed:
            event = AuditEvent(
                kind="resolution",
                turn_id=conversation_id,
                payload={"resolution": resolution, "by": "timeout", "previous": "open"},
            )
            try:
                await p.audit.append(conversation_id, [event], user_id=user_id)
            except Exception:  # The state is stored; only its audit line is missing.
                log.exception("audit.resolution_not_written", conversation_id=conversation_id)

    return PeriodicJob(name=ASSUMED, every=sweep_every(assume_after), run=sweep)


Variants = Mapping[str, Mapping[str, str]]
"""Expert -> variant name -> prompt name (`Orchestrator(variants=...)`)."""


def check_variants(variants: Variants | None) -> dict[str, dict[str, str]]:
    """`variants=` as plain dicts, checked.

    Raises:
        ConfigError: an expert without variants support, or an empty or bad mapping.
    """
    checked: dict[str, dict[str, str]] = {}
    for expert, named in (variants or {}).items():
        if expert not in VARIANT_EXPERTS:
            raise ConfigError(
                f"variants: {expert!r} cannot have variants; use one of {VARIANT_EXPERTS}"
            )
        if not isinstance(named, Mapping) or len(named) < 2:
            raise ConfigError(
                f"variants[{expert!r}] must map two or more variant names to prompt names"
            )
        for name, prompt in named.items():
            if not isinstance(name, str) or not name or not isinstance(prompt, str) or not prompt:
                raise ConfigError(
                    f"variants[{expert!r}]: {name!r} -> {prompt!r} must be two non-empty names"
                )
        checked[expert] = dict(named)
    names = {tuple(named) for named in checked.values()}
    if len(names) > 1:
        raise ConfigError(
            "variants: every expert must name the same variants (one variant per"
            f" conversation), got {sorted(names)}"
        )
    return checked


def variant_of(conversation_id: str, names: list[str]) -> str:
    """The variant a conversation gets: a stable hash of its id (the same in every
    process, after every restart), spread evenly over `names` in their given order."""
    digest = hashlib.sha256(conversation_id.encode()).digest()
    return names[int.from_bytes(digest[:8], "big") % len(names)]
