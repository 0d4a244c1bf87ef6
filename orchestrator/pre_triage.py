"""Before triage: the router's route (no triage call), or the triage expert to ask.

`Orchestrator(router=EmbeddingRouter(...))` (off by default) puts a fast first stage in
front of the triage expert (`experts/router.py`). For each new message:
1. a message that answers the bot's own question for a missing field never gets here: the
   request in progress keeps it (`routing.py`, `pending.py`), with no embedding and no
   triage call;
2. the message is embedded and scored against the categories' vectors (embedded
   once, kept in the store: `threads/routing.py`); a confident route makes no triage call;
3. else triage runs with the router's candidates only (dynamic few-shot).
Without a router, triage is asked with every category, and, when their examples do not
all fit its allowance, with those nearest the message (`experts/triage_fit.py`).

Every decision is audited (`routed`: by, category, embedder, scores, threshold, margin),
and a route with no triage call is kept in the outcome's models as `router` (the
embedder's name). `Reply.routed_by` is `triage` exactly when the outcome's models name the
triage expert (it was called for the turn), so a replayed or retried turn reports it too.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from frontdesk.errors import ModelError
from frontdesk.experts.providers import ModelResponse
from frontdesk.experts.triage import TriageExpert
from frontdesk.orchestrator._pipeline import Pipeline, Turn

log = structlog.get_logger("frontdesk.orchestrator")


@dataclass(frozen=True, kw_only=True)
class Routed:
    """What routing before triage found: a route, or the triage expert to ask."""

    category: str | None
    """Routed with no triage call (`None`: ask `triage`)."""
    reason: str = ""
    triage: TriageExpert


async def before_triage(p: Pipeline, t: Turn, answered: dict[str, ModelResponse]) -> Routed:
    """Route `t`'s message without triage when the router can, or give the triage expert
    to ask (the triage step of `routing.route`): the router's candidates only, or, without
    a router, every category (the examples nearest the message when they do not all fit)."""
    text = t.user_message.content
    if p.router is None:
        return Routed(category=None, triage=p.triage.for_message(text))
    try:
        decision = await p.router.decide(text)
    except ModelError as e:  # An embeddings outage costs the turn a triage call, never the turn.
        log.warning("router.failed", error_class=type(e).__name__)
        t.recorder.note("routed", by="triage", category=None, error=type(e).__name__)
        return Routed(category=None, triage=p.triage.for_message(text))
    t.recorder.note("routed", **decision.audit())
    if decision.category is None:
        return Routed(category=None, triage=p.triage.for_message(text, decision.candidates))
    answered["router"] = ModelResponse(output=decision.category, model=decision.embedder)
    best, runner_up = decision.scores[0][1], decision.scores[1][1]
    return Routed(
        category=decision.category,
        reason=f"router: similarity {best:.3f}, runner-up {runner_up:.3f}",
        triage=p.triage,
    )
