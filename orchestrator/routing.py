"""How a turn finds its categories: what the turn before left first, triage when that does
not decide.

    clarify     the turn before asked which category the customer means (`Clarify`, or
                which request first): an answer that picks one routes there, no triage
    cancel      a request in progress, and "cancel" / "forget it": it is cleared
    resume      a request in progress the bot offered to resume, and "yes, carry on"
    progress    a request in progress, and a message the request expert (run first, with
                the request in progress in view) reads as a missing field or a correction
    triage      anything else; a category other than the request in progress's is a
                digression, after which the reply offers to resume it

Each decision is audited (`pending`, `clarify` events), and the turn records how it was
routed (`TurnOutcome.flow["how"]`), so a replay reproduces the route without triage where
the turn had none. See `orchestrator/pending.py` and `orchestrator/multi_intent.py`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from frontdesk.experts import Category
from frontdesk.frozen import quick_init
from frontdesk.orchestrator import multi_intent, pending
from frontdesk.orchestrator._pipeline import Extracted
from frontdesk.orchestrator._recorder import TurnRecorder
from frontdesk.orchestrator.pending import InProgress

How = Literal["triage", "clarify", "cancel", "resume", "pending"]


@quick_init
@dataclass(frozen=True, kw_only=True)
class Triaged:
    """What triage answered (or its safe fallback)."""

    category: str
    reason: str
    unreadable: bool = False
    categories: tuple[str, ...] = ()
    clarify: tuple[str, ...] = ()
    language: str | None = None
    kept: Extracted | None = None
    """The request expert's answer run beside triage (speculation), when kept."""


@quick_init
@dataclass(frozen=True, kw_only=True)
class Route:
    """Where the turn goes, and what it carries from the turn before."""

    category: str
    reason: str
    how: How
    categories: tuple[str, ...] = ()
    """The message's categories in order (the first is `category`)."""
    clarify: tuple[str, ...] = ()
    """Triage's `Clarify`: the reply asks the customer to choose."""
    unreadable: bool = False
    language: str | None = None
    """Triage's label of the message's language, if it gave one."""
    in_progress: InProgress | None = None
    """The request in progress this turn goes on with (its category is `category`)."""
    digressed_from: InProgress | None = None
    """The request in progress this turn leaves for another category (carried on)."""
    kept: Extracted | None = None
    """The request expert's answer made while routing (not run again)."""
    steps: tuple[str, ...] = field(default=())


def before_of(flow: Mapping[str, Any] | None) -> tuple[InProgress | None, tuple[str, ...], bool]:
    """The request in progress, the categories to choose between, and whether those were
    several requests to order (`multi_intent="ask"`) that the turn before left."""
    if not flow:
        return None, (), False
    clarify = tuple(flow.get("clarify") or ())
    in_progress = pending.carried(flow) if flow.get("pending") else None
    return in_progress, clarify, bool(flow.get("ask_order"))


async def route(
    categories: Mapping[str, Category],
    recorder: TurnRecorder,
    text: str,
    *,
    before: Mapping[str, Any] | None,
    held: InProgress | None,
    ttl: Any,
    triage: Callable[[bool], Awaitable[Triaged]],
    extract: Callable[[str, InProgress], Awaitable[Extracted]],
) -> Route:
    """The turn's route (see the module docstring). `held`: a request held for the
    customer's yes that this message corrects (`confirmation.py`), read as a request in
    progress with nothing missing."""
    in_progress, candidates, ask_order = before_of(before)
    if held is not None:
        in_progress = held
    elif in_progress is not None and pending.expired(in_progress, ttl):
        recorder.note(
            "pending",
            status="expired",
            category=in_progress.category,
            started_in=in_progress.started_in,
        )
        in_progress = None
    if candidates:
        choice = multi_intent.chosen(text, candidates, categories)
        recorder.note("clarify", status="answered" if choice else "unmatched", category=choice)
        if choice is not None:
            order = multi_intent.ordered(choice, candidates) if ask_order else (choice,)
            return Route(
                category=choice, reason="the customer chose", how="clarify", categories=order
            )
    if in_progress is not None and held is None:
        said = pending.said(text)
        if said == "cancel":
            recorder.note("pending", status="cancelled", category=in_progress.category)
            return Route(
                category=in_progress.category,
                reason="the customer cancelled",
                how="cancel",
                in_progress=in_progress,
            )
        if said == "resume" and in_progress.offered:
            recorder.note("pending", status="resumed", category=in_progress.category)
            return Route(
                category=in_progress.category,
                reason="the customer resumed",
                how="resume",
                in_progress=in_progress,
            )
    kept: Extracted | None = None
    if in_progress is not None and in_progress.category in categories:
        kept = await extract(in_progress.category, in_progress)
        request, missing, _, known = kept
        if pending.progressed(in_progress, request, missing, known) or held is not None:
            recorder.note("pending", status="continued", category=in_progress.category)
            return Route(
                category=in_progress.category,
                reason="answers the request in progress",
                how="pending",
                in_progress=in_progress,
                kept=kept,
            )
    # The request expert already ran for the request in progress: no guess beside triage.
    triaged = await triage(kept is None)
    recorder.note("triage", category=triaged.category, reason=triaged.reason)
    named = triaged.categories or (triaged.category,)
    # One category is taken as it is: only several are ordered or pruned (multi_intent.py).
    listed = named if len(named) == 1 else multi_intent.handled(named, categories)
    common = {
        "reason": triaged.reason,
        "how": "triage" if not triaged.clarify else "clarify",
        "unreadable": triaged.unreadable,
        "language": triaged.language,
    }
    if triaged.clarify:
        recorder.note("clarify", status="asked", candidates=list(triaged.clarify))
        return Route(category=triaged.category, clarify=triaged.clarify, **common)  # type: ignore[arg-type]
    if in_progress is not None and listed[0] != in_progress.category:
        recorder.note("pending", status="digression", category=in_progress.category, to=listed[0])
        return Route(
            category=listed[0],
            categories=listed,
            digressed_from=in_progress,
            kept=triaged.kept,
            **common,  # type: ignore[arg-type]
        )
    return Route(
        category=listed[0],
        categories=listed,
        in_progress=in_progress,
        kept=kept if in_progress is not None else triaged.kept,
        **common,  # type: ignore[arg-type]
    )
