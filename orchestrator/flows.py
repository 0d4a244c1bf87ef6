"""What a routed turn records of the conversation (`TurnOutcome.flow`): the request in
progress it leaves, its categories and their steps, a question of which, a cancellation.

`turn.py` runs the experts and handlers; this module builds the decisions around them
(`routing.py` chose the route; `pending.py` and `multi_intent.py` say what each means), and
audits each (`pending`, `multi_intent` events).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from frontdesk.experts import Category, Outcome
from frontdesk.experts.category import HUMAN, OTHER
from frontdesk.frozen import evolved
from frontdesk.orchestrator import multi_intent, pending
from frontdesk.orchestrator._pipeline import Decided, Pipeline, Turn
from frontdesk.orchestrator._recorder import TurnRecorder, jsonable
from frontdesk.orchestrator.multi_intent import MultiIntent
from frontdesk.orchestrator.routing import Route


def asked(
    categories: Mapping[str, Category],
    mode: MultiIntent,
    recorder: TurnRecorder,
    route: Route,
    flow: dict[str, Any],
) -> Decided | None:
    """The turn's decision when nothing runs: the request in progress cancelled, or the
    customer asked which category they mean (`Clarify`) or which request first (`"ask"`);
    `None` when the route's categories are to be handled."""
    listed = route.categories or (route.category,)
    if route.how == "cancel" and route.in_progress is not None:
        outcome = Outcome(instruction=pending.cancelled_instruction(route.in_progress, categories))
        return _nothing_ran(route.category, outcome, {**flow, "cancelled": True})
    if route.clarify:
        outcome = multi_intent.clarify(route.clarify, categories)
        return _nothing_ran(OTHER, outcome, {**flow, "clarify": list(route.clarify)})
    if len(listed) > 1 and mode == "ask" and route.how == "triage":
        recorder.note("multi_intent", mode="ask", categories=list(listed))
        outcome = multi_intent.ask_which(listed, categories)
        flow = {**flow, "clarify": list(listed), "ask_order": True, "categories": list(listed)}
        return _nothing_ran(OTHER, outcome, flow)
    if len(listed) > 1:
        recorder.note("multi_intent", mode="sequential", categories=list(listed))
    return None


def _nothing_ran(category: str, outcome: Outcome, flow: dict[str, Any]) -> Decided:
    return Decided(
        category=category,
        request=None,
        missing=None,
        outcome=outcome,
        handler_ran=False,
        answered={},
        flow=flow,
    )


def after(
    categories: Mapping[str, Category],
    t: Turn,
    route: Route,
    first: Decided,
    flow: dict[str, Any],
) -> Decided:
    """The first step's decision with the turn's flow: the request in progress it starts
    or keeps (more is missing), or the one it leaves for a digression (carried on, and the
    reply offers to resume it)."""
    flow = {**flow, "categories": list(route.categories or (route.category,))}
    outcome = first.outcome
    before = route.in_progress or route.digressed_from
    if first.missing is not None and first.category in categories:
        kept = pending.started(
            first.category, first.missing, first.known, turn_id=t.user_message.id, before=before
        )
        flow["pending"] = kept.to_json()
        status = "kept" if before is not None and before.category == first.category else "started"
        t.recorder.note(
            "pending",
            status=status,
            category=first.category,
            missing=list(kept.missing),
            fields=sorted(kept.fields),
        )
        if route.digressed_from is not None and route.digressed_from.category != first.category:
            t.recorder.note("pending", status="replaced", category=route.digressed_from.category)
    elif route.digressed_from is not None:
        left = route.digressed_from
        if first.category == HUMAN or outcome.handoff is not None:
            t.recorder.note("pending", status="dropped", category=left.category, why="handoff")
        else:
            flow["pending"] = dataclasses.replace(left, offered=True).to_json()
            outcome = outcome.model_copy(
                update={"instruction": outcome.instruction + pending.offer(left, categories)}
            )
            t.recorder.note("pending", status="offered", category=left.category)
    elif route.in_progress is not None and t.pending is None:
        t.recorder.note("pending", status="completed", category=route.in_progress.category)
    return evolved(first, outcome=outcome, flow=flow)


def goes_on(first: Decided, steps: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the sequence of a message's requests goes on after what ran so far: not
    when a step needs more information, hands off, waits for a confirmation or failed."""
    if first.missing is not None or first.outcome.handoff is not None:
        return False
    if first.confirmation is not None or first.handler_failed:
        return False
    if first.request is None and first.category not in (OTHER,):
        return False
    return all(not s.get("need_more_info") and not s.get("handler_failed") for s in steps)


def step_record(p: Pipeline, step: Decided, key: str) -> dict[str, Any]:
    """A step after the first as the flow keeps it (its ruled values scrubbed as the
    turn's own request is, with `scrub_secrets`)."""
    secrets = step.secrets
    scrubbed = secrets is not None and p.secrets is not None and p.secrets.scrub
    request = secrets.request if scrubbed and secrets is not None else jsonable(step.request)
    outcome = step.outcome
    if secrets is not None:  # The values reach the handler, not the reply.
        outcome = outcome.model_copy(update={"instruction": secrets.text(outcome.instruction)})
    return multi_intent.step_json(
        step.category,
        request,
        jsonable(step.missing),
        outcome,
        handler_ran=step.handler_ran,
        handler_failed=step.handler_failed,
        idempotency_key=key,
    )


def with_step(
    categories: Mapping[str, Category],
    t: Turn,
    first: Decided,
    step: Decided,
    steps: list[dict[str, Any]],
) -> Decided:
    """`first` with the steps so far in its flow; a step that needs more information
    becomes the request in progress, one that hands off opens the hand-off."""
    flow = {**(first.flow or {}), "steps": list(steps)}
    flow[FIRST_INSTRUCTION] = first.outcome.instruction
    outcome = first.outcome
    if step.missing is not None and step.category in categories:
        kept = pending.started(
            step.category, step.missing, step.known, turn_id=t.user_message.id, before=None
        )
        flow["pending"] = kept.to_json()
        t.recorder.note(
            "pending", status="started", category=step.category, missing=list(kept.missing)
        )
    if step.outcome.handoff is not None and outcome.handoff is None:
        outcome = outcome.model_copy(update={"handoff": step.outcome.handoff})
    return dataclasses.replace(first, flow=flow, outcome=outcome)


FIRST_INSTRUCTION = "first_instruction"
"""The flow's record of the first step's own instruction (its outcome's `instruction`
covers every step once the message has several)."""


def own(first: Decided) -> Decided:
    """`first` with its own step's instruction (what the store keeps as the outcome's)."""
    said = (first.flow or {}).get(FIRST_INSTRUCTION)
    if said is None or said == first.outcome.instruction:
        return first
    outcome = first.outcome.model_copy(update={"instruction": said})
    return dataclasses.replace(first, outcome=outcome)


def combined(categories: Mapping[str, Category], first: Decided) -> Decided:
    """`first` with one instruction covering its own step and every step after it that
    its flow stored (the response expert writes one reply); unchanged with no such step.
    The same however often it is applied: it starts from the first step's own."""
    flow = first.flow or {}
    steps = flow.get("steps")
    if not steps:
        return first
    mine = own(first).outcome
    listed = [(first.category, mine)]
    listed += [(s["category"], Outcome(instruction=s["instruction"])) for s in steps]
    instruction = multi_intent.combined(listed, categories)
    return dataclasses.replace(first, outcome=mine.model_copy(update={"instruction": instruction}))


def unfinished(stored: Decided) -> bool:
    """Whether a stored outcome's message has requests after the steps stored and nothing
    stopped the sequence: a try of the turn failed between two handlers, so its retry goes
    on from the first step not stored (never one stored again)."""
    flow = stored.flow or {}
    if flow.get("clarify"):  # The customer was asked which one: nothing runs in sequence.
        return False
    steps = flow.get("steps") or ()
    return len(flow.get("categories") or ()) > 1 + len(steps) and goes_on(stored, steps)


def resumed_route(stored: Decided) -> Route:
    """The route of the steps a retry runs after those stored (as the first try's steps
    after the first: no request in progress, nothing extracted while routing)."""
    flow = stored.flow or {}
    return Route(
        category=stored.category,
        reason="the message's next request (a retry after a failed try)",
        how="triage",
        categories=tuple(flow.get("categories") or ()),
    )


_AUDITED = ("how", "language", "language_by", "reply_in", "categories", "clarify", "cancelled")


def audited(flow: Mapping[str, Any] | None) -> dict[str, Any]:
    """What the turn's `outcome` event records of its flow: how it was routed, its
    language, categories, question of which, cancellation, and the category of the request
    in progress it leaves (its fields are in the `request` events, with their rules)."""
    if not flow:
        return {}
    noted = {k: flow[k] for k in _AUDITED if flow.get(k) not in (None, [], False)}
    held = flow.get("pending")
    if held:
        noted["pending"] = held["category"]
    return {"flow": noted}
