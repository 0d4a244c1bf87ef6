"""The request expert of the conversation's current category, run alongside triage.

Most turns stay in the category of the turn before, so the request expert can start a
triage call earlier; `turn.py` settles the guess once triage has answered, or cancels it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

import structlog

from frontdesk.errors import StoreError
from frontdesk.experts.providers import ModelResponse, Speculation
from frontdesk.frozen import evolved
from frontdesk.orchestrator._pipeline import Extracted, Pipeline, Turn
from frontdesk.orchestrator._recorder import TurnRecorder, observing
from frontdesk.threads.builder import ExpertView

log = structlog.get_logger("frontdesk.orchestrator")


class Extract(Protocol):
    """The turn's extraction of one category's request (`turn._extract`)."""

    def __call__(
        self,
        p: Pipeline,
        t: Turn,
        category: str,
        view: ExpertView,
        meta: dict[str, str],
        answered: dict[str, ModelResponse],
        *,
        speculation: Speculation | None = None,
    ) -> Awaitable[Extracted]: ...


@dataclass(kw_only=True)
class SpeculativeRequest:
    """The request expert of the conversation's current category, run alongside triage.

    Most turns stay in the category of the turn before, so the extraction usually starts
    a triage call earlier. The call gets the very `ModelRequest` it would get after triage
    (same view, metadata and cache prefix), so the prompt-cache layout does not change. Its
    attempts go to a recorder of its own, merged into the turn's when it settles, so a
    cancelled call's attempt rows (its cost) stay in the audit log; a `speculation` note
    says whether it was kept.
    """

    recorder: TurnRecorder
    extract: Extract
    """The turn's own extraction (`turn._extract`), run with the speculative ticket."""
    answered: dict[str, ModelResponse] = dataclasses.field(default_factory=dict)
    ticket: Speculation = dataclasses.field(default_factory=Speculation)
    """On the call's `ModelRequest`: tells the model whether its answer was used (a
    `ScriptedModel` gives a discarded call's step back)."""
    task: asyncio.Task[Extracted | None] = dataclasses.field(init=False)
    category: str | None = None
    """The guessed category, once read (`None` before, or on a first turn)."""
    known: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set once the guess is read (two indexed reads: well within a triage call)."""
    closed: bool = False

    @classmethod
    def start(
        cls, p: Pipeline, t: Turn, view: ExpertView, meta: dict[str, str], extract: Extract
    ) -> SpeculativeRequest | None:
        """The speculative call as a task, or `None` when there is no turn before."""
        if t.guessed:  # The start read the route of the turn before: no read here.
            if t.previous_category is None or t.previous_category not in p.requests:
                return None
            spec = cls(recorder=TurnRecorder(turn_id=t.recorder.turn_id), extract=extract)
            spec.category = t.previous_category
            spec.known.set()
            spec.task = asyncio.create_task(spec._extract(p, t, t.previous_category, view, meta))
            return spec
        previous = t.previous_question
        if previous is None:  # A first turn: no current category, nothing to guess.
            return None
        spec = cls(recorder=TurnRecorder(turn_id=t.recorder.turn_id), extract=extract)
        spec.task = asyncio.create_task(spec._run(p, t, previous, view, meta))
        return spec

    async def _run(
        self, p: Pipeline, t: Turn, previous: str, view: ExpertView, meta: dict[str, str]
    ) -> Extracted | None:
        """The guess read apart (a resumed or regenerated turn), then the extraction."""
        try:
            try:  # Two reads by index, while triage is on the wire.
                stored = await p.store.turn_record(previous)
            except StoreError as e:  # Only a guess is lost: the turn extracts after triage.
                log.warning("turn.speculation_skipped", conversation_id=t.conversation_id, error=e)
                return None
            category = None if stored.outcome is None else stored.outcome.category
            if category is None or category not in p.requests:
                return None
            self.category = category
        finally:
            self.known.set()
        return await self._extract(p, t, category, view, meta)

    async def _extract(
        self, p: Pipeline, t: Turn, category: str, view: ExpertView, meta: dict[str, str]
    ) -> Extracted | None:
        with observing(self.recorder):
            spec_turn = evolved(t, recorder=self.recorder)
            return await self.extract(
                p, spec_turn, category, view, meta, self.answered, speculation=self.ticket
            )

    async def settle(
        self, t: Turn, category: str, answered: dict[str, ModelResponse]
    ) -> Extracted | None:
        """The speculative extraction when triage routed to its category (its errors are
        the turn's, as they would be after triage); else `None`, the call cancelled.

        A triage faster than the guess's read waits for the read (it is short) rather than
        losing a guess that may well be right."""
        await self.known.wait()
        # Let a call that has not started yet start (a triage answered at once, by a double):
        # the guess is always sent alongside triage, as with a real model's latency.
        await asyncio.sleep(0)
        if self.category != category:
            await self.discard(t, triage=category)
            return None
        try:
            result = await self.task
        finally:
            self._close(t, kept=True, triage=category)
        answered.update(self.answered)
        return result

    async def discard(self, t: Turn, *, triage: str | None) -> None:
        """Cancel the call (a no-op once settled) and keep its attempts in the audit."""
        if self.closed:
            return
        self.task.cancel()
        try:
            await self.task
        except (asyncio.CancelledError, Exception):  # Its answer, or failure, is not used.
            pass
        self._close(t, kept=False, triage=triage)

    def _close(self, t: Turn, *, kept: bool, triage: str | None) -> None:
        self.closed = True
        if kept:
            self.ticket.keep()
        else:
            self.ticket.discard()
        t.recorder.events.extend(self.recorder.events)
        if self.category is None:  # No call was made (no category to guess).
            return
        usage: dict[str, int] = {}
        for event in self.recorder.events:
            # Every row of the call says so: a replay skips a discarded answer, and the
            # views show its answer (or error) as one the turn did not use.
            event.payload["speculation"] = "kept" if kept else "discarded"
            if event.kind == "model_attempt":
                for key, value in event.payload.get("usage", {}).items():
                    usage[key] = usage.get(key, 0) + value
        t.recorder.note(
            "speculation",
            expert="request",
            category=self.category,
            triage_category=triage,
            kept=kept,
            usage=usage,
        )
