"""One turn, top to bottom: start, the experts, finish.

    start    take the conversation's lease, store the question, read its path (1 transaction)
             for a new message, an edit or a regeneration; a message sent while a person
             has the conversation is kept for them with its waiting marker (no expert runs)
    experts  triage -> request -> handler, whose outcome is stored before going on;
             then the response expert (a retry reuses the stored outcome and calls only it,
             after the handlers of the message's requests that had not run yet);
             what the turn before left is read first (routing.py: a request in progress
             answered, corrected, cancelled or resumed; an answer to "which one?"), and a
             message's several categories are handled in turn (multi_intent.py)
    finish   the reply, the outcome's usage, the jobs that follow it (the memory expert,
             compaction: docs/jobs.md), the audit batch and the lease release
             (1 transaction when the audit log shares the conversation database)
    after    a person when the bot said one takes over

A turn that fails after its question was stored leaves its safe reply as a `failed`
marker under it, so the thread still alternates; a retry with the same client message id
supersedes the marker. `Orchestrator` (`orchestrator/_orchestrator.py`) checks the text
and calls `handle`, `edit` or `regenerate` here.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import operator
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import structlog
from pydantic import BaseModel, ValidationError

from frontdesk import metrics, telemetry
from frontdesk.audit.events import AuditEvent
from frontdesk.db import Connection, reads_beside_writes
from frontdesk.errors import (
    SAFE_REPLY,
    ConversationHandedOff,
    ConversationNotFound,
    IdempotencyConflict,
    LeaseLost,
    MessageNotFound,
    ModelError,
    OutputValidationError,
    ProviderQuotaExhausted,
    Refusal,
    StoreError,
    StreamInterrupted,
    TruncatedOutput,
    TurnFailed,
    UserError,
)
from frontdesk.experts import HandlerContext, NeedMoreInfo, Outcome
from frontdesk.experts.category import HUMAN, OTHER
from frontdesk.experts.providers import Message, ModelResponse, Speculation, Usage
from frontdesk.experts.providers.base import OnDelta
from frontdesk.experts.request import RequestExpert
from frontdesk.experts.response import ResponseExpert, ResponseResult
from frontdesk.experts.triage import TriageExpert
from frontdesk.frozen import evolved
from frontdesk.jobs.store import JobSpec
from frontdesk.knowledge import Passage
from frontdesk.memory import Memory
from frontdesk.orchestrator import (
    _listen,
    approved,
    confirmation,
    fallbacks,
    flows,
    handler_errors,
    handoff,
    pending,
    pre_triage,
    routing,
    spend,
)
from frontdesk.orchestrator import knowledge as _knowledge
from frontdesk.orchestrator import language as _language
from frontdesk.orchestrator import memory as _memory
from frontdesk.orchestrator import review as _review
from frontdesk.orchestrator import screen as _screen
from frontdesk.orchestrator._compaction import compaction_spec
from frontdesk.orchestrator._pipeline import (
    Decided,
    Extracted,
    Pipeline,
    Start,
    Started,
    Turn,
)
from frontdesk.orchestrator._recorder import (
    TurnRecorder,
    field_rules_of,
    jsonable,
    observing,
    usage_dict,
)
from frontdesk.orchestrator.audited import Also, audited
from frontdesk.orchestrator.reply import Reply
from frontdesk.orchestrator.resolution import closed_by_customer, variant_of
from frontdesk.orchestrator.ruled_values import model_of
from frontdesk.orchestrator.speculation import SpeculativeRequest
from frontdesk.ruled import TurnSecrets
from frontdesk.threads.budget import Document
from frontdesk.threads.builder import (
    ExpertView,
    ThreadMessage,
    UserThread,
    build_thread,
    thread_since,
)
from frontdesk.threads.handoff import Opened
from frontdesk.threads.ruled_values import Scrub
from frontdesk.threads.store import (
    MessageRecord,
    Previous,
    TurnLease,
    TurnOutcome,
    TurnRecord,
    TurnStart,
)
from frontdesk.threads.summaries import SummaryStore

log = structlog.get_logger("frontdesk.orchestrator")

T = TypeVar("T")

EXPERTS = ("triage", "request", "response")

# Errors about one answer's content: the route falls back to a person, the turn goes on.
CONTENT_ERRORS = (OutputValidationError, TruncatedOutput, Refusal, ValidationError)


async def run_turn(p: Pipeline, conversation_id: str, start: Start) -> Reply:
    """Answer one user message: start, experts, finish, under the conversation's lease
    (given back in any case). What follows the reply (a person, learning, compaction) was
    recorded in the reply's own transaction. All of it is one `frontdesk.turn` span (the
    expert calls' spans are its children)."""
    with telemetry.turn(conversation_id) as span:
        p, variant = _variant(p, conversation_id)  # Prompt variants: one per conversation.
        span.profile = p.profile or ""
        span.set_variant(variant)  # A label of the turn's metrics.
        lease = p.lease(conversation_id)
        try:
            # Start: the lease, the user message and its path, in one transaction.
            s = await start(lease)
            if s.stored.reply is not None:  # Answered before, or kept for a person.
                reply = reply_from_records(
                    p,
                    s.question,
                    s.stored.reply,
                    s.stored.outcome,
                    replayed=not s.answered_now,
                    user_id=s.user_id,
                )
                return _traced(span, reply, held=s.answered_now)
            t = _turn(s, lease, await _recall(p, s), await _lookup(p, s), p.app, variant)
            t = await _awaiting(p, s, t)
            span.audit_event(t.recorder.events[0].event_id)  # `turn_started`: the question.
            try:
                # The experts, under the turn deadline; a stored outcome skips to the reply.
                with observing(t.recorder):  # Model attempts -> audit events.
                    decided, answer = await _within_deadline(
                        p, t, _experts(p, t, s.stored.outcome), since=lease.started
                    )
                # Finish: the reply, the outcome's usage, the audit batch, the lease release.
                reply = await _finish(p, lease, t, decided, answer)
            except Exception as e:
                await _fail(p, t, e)  # The safe reply as a `failed` marker: the thread alternates.
                raise
        finally:
            await lease.aclose()
        return _traced(span, reply, held=False)


def _traced(span: telemetry.TurnSpan, reply: Reply, *, held: bool) -> Reply:
    """Tell the turn's span (and the turn metrics) how it ended."""
    span.turn_id, span.category = reply.user_message_id, reply.category or ""
    span.replayed, span.held = reply.replayed, held
    if held:
        span.outcome = "held"
    elif reply.replayed:
        span.outcome = "replayed"
    elif reply.handoff:
        span.outcome = "handoff"
    elif reply.need_more_info is not None:
        span.outcome = "need_more_info"
    return reply


# -- start: each kind of turn -----------------------------------------------------------


async def handle(
    p: Pipeline,
    conversation_id: str,
    text: str,
    *,
    user_id: str | None,
    client_message_id: str | None,
) -> Reply:
    """A new message (`Orchestrator.handle`); the text is checked already."""

    def start(lease: TurnLease) -> Awaitable[Started]:
        return start_message(
            p, lease, conversation_id, text, user_id=user_id, client_message_id=client_message_id
        )

    try:
        return await run_turn(p, conversation_id, start)
    except IdempotencyConflict:
        # A retry of a turn whose stored message was scrubbed (`scrub_secrets`) is the same
        # text with its ruled values in it: answered as the repeat it is.
        stored = await _stored_as(p, conversation_id, client_message_id, text)
        if stored is None:
            raise
        return await handle(
            p, conversation_id, stored, user_id=user_id, client_message_id=client_message_id
        )


async def _stored_as(
    p: Pipeline, conversation_id: str, client_message_id: str | None, text: str
) -> str | None:
    """The stored text of the message `client_message_id` when it is `text` scrubbed of
    the ruled values kept from it; else `None` (a real conflict)."""
    if p.secrets is None or client_message_id is None:
        return None
    existing = await p.store.find_by_client_id(conversation_id, client_message_id)
    if existing is None:
        return None
    values = await p.secrets.of_message(existing.id)
    if values and values.text(text) == existing.content:
        return existing.content
    return None


async def start_message(
    p: Pipeline,
    lease: TurnLease,
    conversation_id: str,
    text: str,
    *,
    user_id: str | None,
    client_message_id: str | None,
) -> Started:
    """A new message, stored with its path; or, for a client message id seen before, that
    message: replayed when it was answered, its turn finished when it was not."""
    async with _lookups(p, user_id, text) as lookups:
        begun = await begin(
            p,
            lease,
            conversation_id,
            text,
            user_id=user_id,
            client_message_id=client_message_id,
            token_count=p.counter.count(text),
            recall=lookups.inside,
        )
        question, path = begun.message, begun.path
        if begun.answer is not None:  # A person has the conversation: no expert runs.
            return held(begun.message, begun.answer, user_id)
        stored = TurnRecord(reply=None, outcome=None)
        if path is None:  # A repeat: answered already, or a turn to finish.
            stored = begun.stored or await p.store.turn_record(question.id)
            if stored.reply is None:
                log.info("turn.resume", conversation_id=conversation_id, turn=question.id)
                path = await SummaryStore(p.store.engine).path_since_newest(question.id)
        memories = None if stored.reply is not None else await lookups.memories(begun)
    thread = UserThread() if path is None else thread_since(path)  # None: replayed.
    read = begun.recalled or _knowledge.FirstRead()
    return Started(
        question=question,
        user_id=user_id,
        thread=thread,
        stored=stored,
        memories=memories,
        passages=read.passages,
        previous_category=begun.previous_category,
        guessed=begun.path is not None,
        previous=begun.previous,
    )


async def edit(p: Pipeline, user_message_id: str, text: str, *, user_id: str | None) -> Reply:
    """An edited user message (`Orchestrator.edit`), answered on a sibling branch."""
    original = await _owned_message(p, user_message_id, user_id)
    if original.role != "user":
        raise UserError(f"message {user_message_id} is an assistant message; edit a user one")

    def start(lease: TurnLease) -> Awaitable[Started]:
        return start_edit(p, lease, original, text, user_id=user_id)

    return await run_turn(p, original.conversation_id, start)


async def start_edit(
    p: Pipeline, lease: TurnLease, original: MessageRecord, text: str, *, user_id: str | None
) -> Started:
    """The edited text, stored as a new message under the original's parent, with its path."""
    async with _lookups(p, user_id, text) as lookups:
        begun = await begin(
            p,
            lease,
            original.conversation_id,
            text,
            user_id=user_id,
            parent_id=original.parent_id,
            token_count=p.counter.count(text),
            recall=lookups.inside,
        )
        if begun.answer is not None:  # A person has the conversation: no expert runs.
            return held(begun.message, begun.answer, user_id)
        memories = await lookups.memories(begun)
    assert begun.path is not None, "an edit is a new message"
    read = begun.recalled or _knowledge.FirstRead()
    return Started(
        question=begun.message,
        user_id=user_id,
        thread=thread_since(begun.path),
        stored=TurnRecord(reply=None, outcome=None),
        memories=memories,
        passages=read.passages,
        previous_category=begun.previous_category,
        guessed=True,
        previous=begun.previous,
    )


@dataclass
class _Lookups:
    """A start's lookups: the reads that ride its own transaction (no extra round trip),
    and the memory lookup when it runs beside that transaction instead."""

    inside: Callable[[Connection], _knowledge.FirstRead] | None
    beside: asyncio.Task[list[Memory]] | None

    async def memories(self, begun: TurnStart) -> list[Memory] | None:
        """The user's facts, from whichever read looked them up (`None`: neither did)."""
        if self.beside is not None:
            return await self.beside
        return None if begun.recalled is None else begun.recalled.memories


@contextlib.asynccontextmanager
async def _lookups(p: Pipeline, user_id: str | None, text: str) -> AsyncIterator[_Lookups]:
    """The memory and knowledge lookups of a start. The memory lookup runs beside the
    start's transaction where the database does better so (`db.reads_beside_writes`:
    PostgreSQL ranks on a second connection while the start writes), else inside it, once
    this user's memory work still running here has settled. A start that needs no facts
    (a replay, a message kept for a person) leaves the beside read unread; it is cancelled
    when the block ends."""
    memory = p.memory
    beside = memory is not None and user_id is not None and reads_beside_writes(p.store.engine)
    in_start = None if memory is None or beside else await memory.reader(user_id, text)
    library = p.knowledge
    looked_up = None if library is None or await library.empty() else library.reader(text)
    inside = _knowledge.first_read(in_start, looked_up)
    task = None
    if beside and memory is not None:
        task = asyncio.ensure_future(memory.recall(user_id, text))
    try:
        yield _Lookups(inside=inside, beside=task)
    finally:
        if task is not None:
            task.cancel()


async def regenerate(p: Pipeline, assistant_message_id: str, *, user_id: str | None) -> Reply:
    """The same user message answered again (`Orchestrator.regenerate`): a sibling answer."""
    answer = await _owned_message(p, assistant_message_id, user_id)
    if answer.role != "assistant" or answer.parent_id is None:
        raise UserError(f"message {assistant_message_id} is not an assistant message")
    if answer.author != "bot" or answer.kind == "handoff":
        raise UserError(
            f"message {assistant_message_id} was not written by the bot (an operator's reply"
            " or a hand-off's waiting message); only the bot's replies can be regenerated"
        )
    question = await p.store.get(answer.parent_id)
    if question.role != "user":
        raise UserError(f"message {assistant_message_id} answers no user message")

    def start(lease: TurnLease) -> Awaitable[Started]:
        return start_regeneration(p, lease, question, user_id=user_id)

    return await run_turn(p, answer.conversation_id, start)


async def start_regeneration(
    p: Pipeline, lease: TurnLease, question: MessageRecord, *, user_id: str | None
) -> Started:
    """The question's path again, with its stored outcome (reused: the handler never runs
    twice); refused while a person has the conversation."""
    await lease.take()
    if await p.store.handoffs.current(question.conversation_id) is not None:
        raise ConversationHandedOff(
            f"conversation {question.conversation_id!r} is with a person; hand it back"
            " (hand_back) before regenerating a reply",
            conversation_id=question.conversation_id,
        )
    stored = await p.store.turn_record(question.id)
    return Started(
        question=question,
        user_id=user_id,
        thread=await build_thread(p.store, question.id),
        stored=TurnRecord(reply=None, outcome=stored.outcome),
    )


def held(question: MessageRecord, marker: MessageRecord, user_id: str | None) -> Started:
    """A message kept for a person (the conversation is handed off): its answer is the
    waiting marker the start stored, and no expert runs."""
    return Started(
        question=question,
        user_id=user_id,
        thread=UserThread(),
        stored=TurnRecord(reply=marker, outcome=None),
        answered_now=True,
    )


async def begin(
    p: Pipeline,
    lease: TurnLease,
    conversation_id: str,
    text: str,
    *,
    user_id: str | None,
    **kwargs: Any,
) -> TurnStart:
    """A new message's first transaction: `ConversationStore.start_turn`, which also reads
    the hand-off (keeping the message for a person, or handing a timed-out one back), with
    the audit events of what it wrote for one (`audited`)."""

    def write(also: Also[TurnStart] | None) -> Awaitable[TurnStart]:
        return p.store.start_turn(
            conversation_id,
            text,
            lease=lease,
            user_id=user_id,
            handoff=p.handoff,
            also=also,
            profile=p.profile,
            **kwargs,
        )

    return await audited(
        p,
        conversation_id,
        write,
        lambda begun: handoff.held_events(begun, user_id),
        lambda _: user_id,
    )


async def _awaiting(p: Pipeline, s: Started, t: Turn) -> Turn:
    """`t` with the request the turn before left waiting for this turn's yes, if any
    (`orchestrator/confirmation.py`): read by the start with the guess of the category (no
    read of its own), or, for a resumed turn, here when a category confirms."""
    previous = s.previous
    if not s.guessed and s.stored.outcome is None:
        before = t.previous_question
        if before is not None:
            record = await p.store.turn_record(before)
            if record.outcome is not None:
                previous = Previous(
                    user_message_id=before,
                    category=record.outcome.category,
                    confirmation=record.outcome.confirmation,
                    flow=record.outcome.flow,
                )
    held = None
    if previous is not None and previous.confirmation:  # A request held for a yes.
        held = confirmation.pending_of(previous, s.question.id)
    flow = None if previous is None else previous.flow
    if held is None and flow is None:
        return t
    return evolved(t, pending=held, before=flow)


async def _recall(p: Pipeline, s: Started) -> list[Document]:
    """The user's facts, ranked for this turn's question (`orchestrator/memory.py`)."""
    if p.memory is None:
        return []
    memories = s.memories
    if memories is None:
        memories = await p.memory.recall(s.user_id, s.question.content)
    # Never this conversation's own summary; no past conversation when they are off.
    return _memory.ranked(
        memories, conversation_id=s.question.conversation_id, past=p.past is not None
    )


async def _lookup(p: Pipeline, s: Started) -> Sequence[Passage]:
    """The business's passages for this turn's question (`orchestrator/knowledge.py`)."""
    if p.knowledge is None:
        return ()
    if s.passages is not None:
        return s.passages
    if await p.knowledge.empty():  # Nothing to find (no call to an embeddings endpoint).
        return ()
    return await p.knowledge.lookup(s.question.content)


def _turn(
    s: Started,
    lease: TurnLease,
    memory: Sequence[Document],
    passages: Sequence[Passage],
    app: Mapping[str, object],
    variant: str | None = None,
) -> Turn:
    recorder = TurnRecorder(turn_id=s.question.id)
    recorder.note(
        "turn_started",
        user_message_id=s.question.id,
        client_message_id=s.question.client_message_id,
        parent_id=s.question.parent_id,
        text=s.question.content,
        user_id=s.user_id,
        app=app,
    )
    return Turn(
        conversation_id=s.question.conversation_id,
        user_id=s.user_id,
        user_message=s.question,
        thread=s.thread,
        recorder=recorder,
        lease=lease,
        memory=memory,
        previous_category=s.previous_category,
        guessed=s.guessed,
        passages=passages,
        documents=_knowledge.ranked(passages),
        variant=variant,
    )


def _variant(p: Pipeline, conversation_id: str) -> tuple[Pipeline, str | None]:
    """The pipeline with the conversation's prompt variant's experts (`variant_of`: a
    stable hash of its id), and the variant's name; unchanged without variants."""
    if not p.variants:
        return p, None
    name = variant_of(conversation_id, list(p.variants))
    triage, response = p.variants[name]
    return dataclasses.replace(p, triage=triage, response=response), name


def _stamped(t: Turn) -> list[AuditEvent]:
    """The turn's audit events, each stamped with the conversation's variant (if any)."""
    if t.variant is not None:
        for event in t.recorder.events:
            event.payload["variant"] = t.variant
    return t.recorder.events


# -- the experts -------------------------------------------------------------------------


async def _experts(
    p: Pipeline, t: Turn, earlier: TurnOutcome | None
) -> tuple[Decided, ResponseResult]:
    # Before any model call (spend.py); not for a retry whose outcome is stored: what the
    # handler did must still be told.
    if p.spend_limit is not None and earlier is None:
        await spend.check(
            p.spend_limit,
            p.store,
            t.recorder,
            user_id=t.user_id,
            conversation_id=t.conversation_id,
        )
    decided = await _decide_once(p, t, earlier)
    if p.review is None or decided.outcome.reply is not None:
        return decided, await _respond(p, t, decided)
    return await _reviewed(p, t, p.review, decided)


async def _reviewed(
    p: Pipeline, t: Turn, review: _review.Review, decided: Decided
) -> tuple[Decided, ResponseResult]:
    """The reply once the review expert approved it (review.py); its verdicts' usage is
    the turn's `review` usage."""

    def draft(note: str | None) -> Awaitable[ResponseResult]:
        return _respond(p, t, decided, note=note, stream=False)

    done = await _review.reviewed(
        review,
        t.recorder,
        thread=_turns(_view(p, t, "response")),
        instruction=decided.outcome.instruction,
        metadata=_meta(t),
        draft=draft,
        sink=_first_token_timed(_listen.delta_sink(), since=t.lease.started),
        user_message_id=t.user_message.id,
    )
    answered = {**decided.answered, "review": done.review}
    return dataclasses.replace(decided, answered=answered), done.answer


async def _decide_once(p: Pipeline, t: Turn, earlier: TurnOutcome | None) -> Decided:
    """Triage, request and handler, the handler's outcome stored before the reply is made;
    or the outcome an earlier try of this turn stored (nothing is run again)."""
    if earlier is not None:
        t.recorder.note(
            "outcome_reused", category=earlier.category, handler_ran=earlier.handler_ran
        )
        decided = _decided_from(p, earlier)
        # A stream of a retried turn still shows its route.
        _listen.routed(decided.category, by=_routed_by(earlier.models))
        if decided.category in p.requests:
            _listen.extracted(decided.request, decided.missing)
        if flows.unfinished(decided):  # A try failed between two of the message's handlers.
            return await _resumed(p, t, decided)
        return decided
    if p.screen is not None:  # The app's check before triage (screen.py).
        stopped = await _screen.screened(
            p.screen, p.screen_mode, t.recorder, t.user_message.content, _screen_context(t)
        )
        if stopped is not None:  # Refused or handed off: no expert decides.
            return await _settled(p, t, _builtin(t, stopped))
    if t.pending is not None:  # The customer answers a confirmation question.
        said = await confirmation.answer(
            p.store,
            p.categories,
            t.recorder,
            t.pending,
            t.user_message.content,
            turn_id=t.user_message.id,
            lease=t.lease,
            ttl=p.confirm_ttl,
            keeper=_keeper(p, t),
        )
        if said is not None:
            return await _confirmed(p, t, said)
    meta = _meta(t)
    answered: dict[str, ModelResponse] = {}
    view, request_view = _view(p, t, "triage"), _view(p, t, "request")
    # A message that is not a yes or no to a held request corrects it (confirmation.py).
    held = None if t.pending is None else pending.held(t.pending)

    async def triage(guess_request: bool) -> routing.Triaged:
        speculate = p.speculate and guess_request
        guess = SpeculativeRequest.start(p, t, request_view, meta, _extract) if speculate else None
        try:
            routed = await pre_triage.before_triage(p, t, answered)  # The router, if any.
            triaged = (
                routing.Triaged(category=routed.category, reason=routed.reason)
                if routed.category is not None
                else await _triage(p, t, routed.triage, view, meta, answered)
            )
            _listen.routed(triaged.category, by="triage" if routed.category is None else "router")
            kept = None if guess is None else await guess.settle(t, triaged.category, answered)
        finally:
            if guess is not None:  # The turn failed or was cut off: the call must not outlive it.
                await guess.discard(t, triage=None)
        return evolved(triaged, kept=kept)

    def extract(category: str, in_progress: pending.InProgress) -> Awaitable[Extracted]:
        return _extract(p, t, category, request_view, meta, answered, in_progress=in_progress)

    # What the turn before left (a request in progress, a question of which), then triage.
    route = await routing.route(
        p.categories,
        t.recorder,
        t.user_message.content,
        before=t.before,
        held=held,
        ttl=p.pending_ttl,
        triage=triage,
        extract=extract,
    )
    return await _routed(p, t, route, request_view, meta, answered)


async def _routed(
    p: Pipeline,
    t: Turn,
    route: routing.Route,
    view: ExpertView,
    meta: dict[str, str],
    answered: dict[str, ModelResponse],
) -> Decided:
    """The route's categories handled in turn (`multi_intent.py`), each step's outcome
    stored once its handler ran; or the question the route asks (which one, which first),
    or the cancellation of the request in progress."""
    flow = _language_of(p, t, route.language, how=route.how)
    asked = flows.asked(p.categories, p.multi_intent, t.recorder, route, flow)
    if asked is not None:  # Nothing runs: cancelled, or the customer is asked to choose.
        _listen.routed(asked.category, by=_routed_by(answered))
        return await _settled(p, t, evolved(asked, answered=answered))
    categories = route.categories or (route.category,)
    first = await _step(p, t, route, categories[0], view, meta, answered)
    first = await _settled(p, t, flows.after(p.categories, t, route, first, flow))
    plain = evolved(route, in_progress=None, kept=None, digressed_from=None)
    return await _next_steps(p, t, plain, first, view, meta, answered)


async def _resumed(p: Pipeline, t: Turn, earlier: Decided) -> Decided:
    """A retry of a turn that failed after some of its message's handlers ran (their
    outcomes stored) and before the next: the steps not stored yet run, each once."""
    flow = earlier.flow or {}
    done = 1 + len(flow.get("steps") or ())
    t.recorder.note("multi_intent", status="resumed", categories=flow["categories"][done:])
    route = flows.resumed_route(earlier)
    view = _view(p, t, "request")
    return await _next_steps(p, t, route, flows.own(earlier), view, _meta(t), {})


async def _next_steps(
    p: Pipeline,
    t: Turn,
    route: routing.Route,
    first: Decided,
    view: ExpertView,
    meta: dict[str, str],
    answered: dict[str, ModelResponse],
) -> Decided:
    """The message's categories after the steps `first`'s flow has stored, in turn, each
    step's outcome stored once its handler ran (before the next one runs); `first` with one
    instruction covering every step (`flows.combined`)."""
    categories = list((first.flow or {}).get("categories") or (first.category,))
    stored_steps: list[dict[str, Any]] = list((first.flow or {}).get("steps") or ())
    for index in range(1 + len(stored_steps), len(categories)):
        if not flows.goes_on(first, stored_steps):  # Needs more, a person, or not done.
            t.recorder.note("multi_intent", status="stopped", not_handled=categories[index:])
            break
        category = categories[index]
        step = await _step(p, t, route, category, view, meta, answered, index=index)
        key = _step_key(t, index)
        stored_steps.append(flows.step_record(p, step, key))
        shown = stored_steps[-1]["instruction"]  # Its ruled values reach the handler only.
        t.recorder.note("outcome", category=category, instruction=shown, step=index)
        first = flows.with_step(p.categories, t, first, step, stored_steps)
        if step.handler_ran:  # Each handler's outcome is stored before the next one runs.
            opened = await p.store.save_outcome(_stored(p, t, first), lease=t.lease)
            t.recorder.events.extend(handoff.opened_events(opened))  # A step that hands off.
    return flows.combined(p.categories, first)


async def _step(
    p: Pipeline,
    t: Turn,
    route: routing.Route,
    category: str,
    view: ExpertView,
    meta: dict[str, str],
    answered: dict[str, ModelResponse],
    *,
    index: int = 0,
) -> Decided:
    """One category of the message: its request (extracted, or the one made while
    routing), then its handler, or the confirmation question (confirmation.py)."""
    in_progress = route.in_progress
    kept = route.kept if route.kept is not None and index == 0 else None
    if kept is None:
        kept = await _extract(p, t, category, view, meta, answered, in_progress=in_progress)
    request, missing, from_memory, known = kept
    corrected: frozenset[str] = frozenset()
    if in_progress is not None:  # Answered or corrected: the handler learns which changed.
        corrected = pending.corrected(in_progress.fields, request, known)
        if request is None and route.how == "resume":
            request = pending.completed(p.categories[category].request, in_progress.fields, known)
            missing = None if request is not None else missing
    secrets = None if missing is not None else _secrets_of(p, t, request)
    if category in p.requests:
        _listen.extracted(_shown(p, request, t.user_id), missing)
    t.recorder.note(
        "request",
        category=category,
        request=jsonable(request),
        need_more_info=jsonable(missing),
        **({"from_memory": list(from_memory)} if from_memory else {}),
        **({"corrected": sorted(corrected)} if corrected else {}),
        **({"step": index} if index else {}),
        **field_rules_of(request),  # What `audit show` and the exports redact of it.
    )
    # Only an app with a `confirm` category asks (`Pipeline.confirms`, known at open).
    asked = (
        confirmation.ask(p.categories, t.recorder, category, request, missing)
        if p.confirms
        else None
    )
    if asked is None:
        outcome, handler_ran, handler_failed = await _decide(
            p,
            t,
            category,
            request,
            missing,
            route.reason,
            from_memory,
            secrets,
            unreadable=route.unreadable,
            corrected=corrected,
            step=index,
        )
    else:  # A `confirm` category: the question, not the handler (confirmation.py); the
        # request's ruled values held apart for the yes (the turn is scrubbed as any other).
        asked = await confirmation.hold(asked, request, _keeper(p, t), asked_in=t.user_message.id)
        outcome, handler_ran, handler_failed = asked.outcome, False, False
        if corrected:  # Told to the handler with the yes.
            asked.record["corrected"] = sorted(corrected)
    return Decided(
        category=category,
        request=request,
        missing=missing,
        outcome=outcome,
        handler_ran=handler_ran,
        handler_failed=handler_failed,
        answered=answered,
        confirmation=None if asked is None else asked.record,
        secrets=secrets,
        known=dict(known),
    )


def _language_of(p: Pipeline, t: Turn, said: str | None, *, how: str) -> dict[str, Any]:
    """The turn's flow record so far: how it was routed, and its language (audited)."""
    before = None if t.before is None else t.before.get("language")
    language, by = _language.of_turn(said, t.user_message.content, before)
    reply_in = _language.answered_in(language, p.languages)
    return {"how": how, "language": language, "language_by": by, "reply_in": reply_in}


def _screen_context(t: Turn) -> _screen.ScreenContext:
    return _screen.ScreenContext(
        conversation_id=t.conversation_id, user_id=t.user_id, thread=t.thread.messages
    )


def _builtin(t: Turn, outcome: Outcome) -> Decided:
    """A turn decided before triage: handed off (`HUMAN`) or answered as `OTHER`."""
    category = HUMAN if outcome.handoff is not None else OTHER
    _listen.routed(category, by="router")  # No triage call.
    return Decided(
        category=category,
        request=None,
        missing=None,
        outcome=outcome,
        handler_ran=False,
        answered={},
    )


async def _confirmed(p: Pipeline, t: Turn, said: confirmation.Answered) -> Decided:
    """The answer to a confirmation question: on "yes" the handler, with the request that
    was asked about; else the outcome `confirmation.answer` decided."""
    _listen.routed(said.category, by="router")  # The yes or no, read by rule.
    _listen.extracted(_shown(p, said.request, t.user_id), None)
    secrets = None
    corrected = frozenset(t.pending.record.get("corrected") or ()) if t.pending else frozenset()
    if said.run:
        secrets = _secrets_of(p, t, said.request)
        outcome, handler_ran, handler_failed = await _decide(
            p, t, said.category, said.request, None, "confirmed", (), secrets, corrected=corrected
        )
    else:
        assert said.outcome is not None
        outcome, handler_ran, handler_failed = said.outcome, False, False
    decided = Decided(
        category=said.category,
        request=said.request,
        missing=None,
        outcome=outcome,
        handler_ran=handler_ran,
        handler_failed=handler_failed,
        answered={},
        confirmation=said.record,
        secrets=secrets,
        flow={
            **_language_of(p, t, None, how="confirmation"),
            "categories": [said.category],
            "cancelled": said.record.get("status") == "declined",
        },
    )
    decided = await _settled(p, t, decided)
    if said.release is not None and handler_ran:  # Its outcome stored: the values go.
        await p.store.answer_confirmation(said.asked_in, said.release, lease=t.lease)
    return decided


async def _settled(p: Pipeline, t: Turn, decided: Decided) -> Decided:
    """`decided`, audited; stored at once when the handler ran (the developer's code acted:
    a retry of the turn must reuse it, never run it again)."""
    secrets = decided.secrets
    if secrets is not None:  # The values reach the handler, not the reply.
        outcome = decided.outcome
        decided = evolved(
            decided,
            outcome=outcome.model_copy(update={"instruction": secrets.text(outcome.instruction)}),
        )
    outcome, handler_ran = decided.outcome, decided.handler_ran
    t.recorder.note(
        "outcome",
        category=decided.category,
        instruction=outcome.instruction,
        data=jsonable(outcome.data),
        **flows.audited(decided.flow),  # How it was routed, its language (`audit replay`).
    )
    if handler_ran:  # The developer's code acted: keep what it decided before going on.
        try:
            opened = await p.store.save_outcome(
                _stored(p, t, decided), lease=t.lease, scrub=_scrub(p, t, secrets)
            )
            t.recorder.events.extend(handoff.opened_events(opened))  # With the turn's batch.
        except LeaseLost:
            raise
        except StoreError as e:
            raise TurnFailed(str(e), user_message_id=t.user_message.id, stage="outcome") from e
    return decided


async def _triage(
    p: Pipeline,
    t: Turn,
    triage: TriageExpert,
    view: ExpertView,
    meta: dict[str, str],
    answered: dict[str, ModelResponse],
) -> routing.Triaged:
    """The category and why; when the triage answer is unusable, `OTHER` marked unreadable
    (`on_unreadable="ask"`: the customer is asked again) or `HUMAN` (a safe default)."""
    try:
        result = await _stage(
            "triage",
            t,
            triage.run(
                _turns(view),
                metadata=meta,
                cache_prefix=view.cache_prefix_messages,
                observer=t.recorder,
                memory=_memory.block(view),
            ),
            fallback=True,
        )
    except CONTENT_ERRORS as e:
        # Called, if unusable: the turn was routed by triage (`Reply.routed_by`).
        answered["triage"] = ModelResponse(output=None, model=triage.call.model.name)
        if p.on_unreadable == "ask":
            why = f"triage answer unusable ({type(e).__name__}); asking again"
            return routing.Triaged(category=OTHER, reason=why, unreadable=True)
        why = f"triage answer unusable ({type(e).__name__}); handing off"
        return routing.Triaged(category=HUMAN, reason=why)
    answered["triage"] = result.response
    return routing.Triaged(
        category=result.category,
        reason=result.reason,
        categories=result.categories,
        clarify=result.clarify,
        language=result.language,
    )


async def _extract(
    p: Pipeline,
    t: Turn,
    category: str,
    view: ExpertView,
    meta: dict[str, str],
    answered: dict[str, ModelResponse],
    *,
    speculation: Speculation | None = None,
    in_progress: pending.InProgress | None = None,
) -> Extracted:
    """The category's request, or what is missing; nothing for the built-ins. A request
    in progress goes with the thread as a labelled block (`pending.block`)."""
    expert = p.requests.get(category)
    if expert is None:
        return None, None, (), {}
    # Passages only for a category that asked for them (`Category(knowledge=True)`).
    sent = view.fit.documents if p.categories[category].knowledge else []
    messages, passages = _knowledge.fold(_turns(view), t.passages, sent)
    # Remembered facts only for a category that takes them (`Category(memory=False)`).
    memory = _memory.block(view) if p.categories[category].memory else None
    if in_progress is not None:
        memory = pending.joined(memory, pending.block(in_progress, p.categories))
    try:
        result = await _stage(
            "request",
            t,
            expert.run(
                messages,
                metadata=meta,
                cache_prefix=view.cache_prefix_messages,
                observer=t.recorder,
                memory=memory,
                passages=passages,
                speculation=speculation,
            ),
            fallback=True,
        )
    except CONTENT_ERRORS as e:
        t.recorder.note("request_failed", category=category, error=f"{type(e).__name__}: {e}")
        return None, None, (), {}
    answered["request"] = result.response
    from_memory = result.from_memory
    if memory is not None:  # What the model did not own up to, found by value.
        from_memory += _memory.filled_from(result.request, memory, messages, from_memory)
    return result.request, result.need_more_info, from_memory, result.known


async def _decide(
    p: Pipeline,
    t: Turn,
    category: str,
    request: BaseModel | None,
    missing: NeedMoreInfo | None,
    reason: str,
    from_memory: Sequence[str] = (),
    secrets: TurnSecrets | None = None,
    *,
    unreadable: bool = False,
    corrected: frozenset[str] = frozenset(),
    step: int = 0,
) -> tuple[Outcome, bool, bool]:
    """The handler's outcome ("TradCode"), or the built-in outcome for this route; whether
    the handler ran, and whether it failed. A hand-off's outcome carries triage's `reason`
    (for the person); the handler learns which fields came from remembered facts."""
    if unreadable:  # Triage's answer could not be read: ask again (`_ask_again`).
        return await _ask_again(p, t, None, reason), False, False
    if category == HUMAN:
        return fallbacks.handoff(reason), False, False
    if category == OTHER:
        return fallbacks.small_talk(p.categories.values()), False, False
    if missing is not None:
        return fallbacks.ask_for(missing), False, False
    if request is None:  # The extraction was unusable: ask again, or a person.
        why = f"the {category} request could not be read"
        if p.on_unreadable == "handoff":
            return fallbacks.handoff(why), False, False
        return await _ask_again(p, t, category, why), False, False
    handler = p.categories[category].handler
    assert handler is not None
    context = HandlerContext(
        conversation_id=t.conversation_id,
        user_id=t.user_id,
        category=category,
        turn_id=t.user_message.id,
        store=p.store.handler_store(category),
        state=p.store.handler_state(category, conversation_id=t.conversation_id, user_id=t.user_id),
        extras=p.context_extras,
        idempotency_key=_step_key(t, step),
        **_memory.for_handler(
            p.memory,
            t.user_id,
            t.user_message,
            t.recorder,
            {} if secrets is None else secrets.known,
        ),
        from_memory=frozenset(from_memory),
        corrected=corrected,
    )
    try:
        outcome = handler_errors.checked(await handler(request, context))
    except Exception as e:  # The developer's code: seen (log, audit), then contained or raised.
        fallback = handler_errors.failed(
            e,
            mode=p.handler_errors,
            category=category,
            conversation_id=t.conversation_id,
            turn_id=t.user_message.id,
            recorder=t.recorder,
        )
        return fallback, True, True
    return outcome, True, False


async def _ask_again(p: Pipeline, t: Turn, category: str | None, why: str) -> Outcome:
    """An unreadable answer's outcome (`on_unreadable="ask"`): a question built from the
    category's request (its required fields) or "could you say that another way?"; after
    `ASKS_BEFORE_HANDOFF` such turns in a row, a hand-off. Only this path reads the turns
    before (a plain turn reads nothing more)."""
    streak = 0
    for message_id in _previous_questions(t, fallbacks.ASKS_BEFORE_HANDOFF):
        try:
            earlier = (await p.store.turn_record(message_id)).outcome
        except StoreError:
            break
        if earlier is None or not fallbacks.is_unreadable(earlier.instruction):
            break
        streak += 1
    t.recorder.note("unreadable", category=category, error=why, asked_before=streak)
    if streak >= fallbacks.ASKS_BEFORE_HANDOFF:
        return fallbacks.handoff(f"{why}; {streak + 1} unreadable messages in a row")
    model = None if category is None else p.categories[category].request
    return fallbacks.unreadable(fallbacks.required_fields(model))


def _previous_questions(t: Turn, limit: int) -> list[str]:
    """The ids of the user messages before this one on the thread, newest first."""
    ids: list[str] = []
    for m in reversed(t.thread.messages[:-1]):
        if len(ids) >= limit:
            break
        if m.role == "user" and m.message_id is not None:
            ids.append(m.message_id)
    return ids


async def _respond(
    p: Pipeline, t: Turn, decided: Decided, *, note: str | None = None, stream: bool = True
) -> ResponseResult:
    """The reply: the thread plus ONE assistant instruction message, sent to the response
    expert; or the outcome's approved words, verbatim (`Outcome.reply`: no model call).
    After the handler acted, a failed or cut-off answer falls back to a plain reply built
    from the outcome (`fallbacks.plain_reply`): the action happened, so the customer hears
    of it rather than getting a failed turn (a stream already shown is the exception: its
    `StreamInterrupted` fails the turn as before). `note`: a reviewer's on the draft before
    (review.py), whose drafts are not streamed."""
    if decided.outcome.reply is not None:
        return await approved.reply(t.recorder, decided.outcome.reply, _listen.delta_sink())
    view = _view(p, t, "response")
    turns = _turns(view)
    if decided.secrets is not None:  # Ruled values reach the handler only.
        turns = [Message(role=m["role"], content=decided.secrets.text(m["content"])) for m in turns]
    # The passages the budget kept, after the question: reference text, not in the thread.
    messages, passages = _knowledge.fold(turns, t.passages, view.fit.documents, cite=True)
    sink = _listen.delta_sink() if stream else None
    reply_in = None if decided.flow is None else decided.flow.get("reply_in")
    instruction = _language.instructed(decided.outcome.instruction, reply_in)
    if note is not None:  # A reviewer rejected the draft before (review.py).
        instruction += f"\n\nA reviewer rejected the previous draft: {note} Fix that."
    call = p.response.run(
        messages,
        instruction,
        metadata=_meta(t),
        cache_prefix=view.cache_prefix_messages,
        on_delta=_first_token_timed(sink, since=t.lease.started),
        observer=t.recorder,
        memory=_memory.block(view),
        passages=passages,
    )
    try:
        result = await _stage("response", t, call)
    except TurnFailed as e:
        if not decided.handler_ran or isinstance(e.__cause__, StreamInterrupted):
            raise
        return _plain(t, decided, type(e.__cause__).__name__, f"{e}")
    if sink is None and fallbacks.echoes_instruction(result.text, decided.outcome.instruction):
        # A small model that copies its input: the instruction never reaches the customer.
        return _plain(t, decided, "EchoedInstruction", "the reply repeated the instruction")
    return result


def _plain(t: Turn, decided: Decided, error_class: str, error: str) -> ResponseResult:
    """The plain reply built from the outcome, in place of the response expert's."""
    text = fallbacks.plain_reply(decided.outcome)
    t.recorder.note("response_fallback", error=f"{error_class}: {error}")
    log.warning(  # The class only: a provider's message may quote the user.
        "turn.response_fallback", conversation_id=t.conversation_id, error_class=error_class
    )
    return ResponseResult(text=text, response=ModelResponse(output=text, model=""))


def _first_token_timed(sink: OnDelta | None, *, since: float) -> OnDelta | None:
    """`sink`, counting the time from the turn's start (`since`, monotonic) to its first
    text delta (`frontdesk_turn_time_to_first_token_seconds`); `None` stays `None`."""
    if sink is None:
        return None
    first = [True]

    async def delta(text: str) -> None:
        if first[0]:
            first[0] = False
            metrics.first_token(time.monotonic() - since)
        await sink(text)

    return delta


async def _stage(stage: str, t: Turn, call: Awaitable[T], *, fallback: bool = False) -> T:
    """Await one expert call; an outage (or, unless `fallback`, a bad answer) fails the turn.

    With `fallback`, errors about the answer's content are re-raised for the caller to
    take its safe route; provider outages always become `TurnFailed`, which carries the
    stored user message's id and a safe reply.
    """
    try:
        return await call
    except CONTENT_ERRORS as e:
        if fallback:
            raise
        raise TurnFailed(str(e), user_message_id=t.user_message.id, stage=stage) from e
    except ModelError as e:
        raise TurnFailed(str(e), user_message_id=t.user_message.id, stage=stage) from e


# -- finish ------------------------------------------------------------------------------


async def _finish(
    p: Pipeline, lease: TurnLease, t: Turn, decided: Decided, answer: ResponseResult
) -> Reply:
    """Store the reply, the outcome and the jobs that follow it, write the audit batch and
    give the lease back: one transaction when the audit log shares the conversation
    database, else in that order (`audited`, the path of a hand-off's writes too)."""
    text = answer.text if decided.secrets is None else decided.secrets.text(answer.text)
    reply = p.store.stage_reply(
        t.user_message,
        text,
        model=answer.response.model or None,
        prompt_versions=_prompt_versions(p, decided.category, t.variant),
    )
    cited = _knowledge.citation_payload(answer.passages, answer.cited)  # Checked, audited.
    t.recorder.note("reply", assistant_message_id=reply.id, text=text, model=reply.model, **cited)
    answered = {**decided.answered, "response": answer.response}
    outcome = _stored(p, t, evolved(decided, answered=answered), answer.passages, answer.cited)
    scrub = _scrub(p, t, decided.secrets)
    jobs = _jobs_after(p, t, reply)
    if decided.outcome.resolves:  # The handler's effect completes what the customer came for.
        t.recorder.note("resolution", resolution="resolved", by="handler")
    closes = closed_by_customer(t.recorder, decided.outcome, answer)  # "That's all."
    if p.audit is not None:
        await p.audit.prepare_key(t.user_id)  # Only a user's first turn (per process) writes.

    async def write(also: Also[Opened | None] | None) -> Opened | None:
        # Written apart, the batch goes in under the lease (`run_turn` gives it back after).
        release = also is not None or p.audit is None
        finished = await p.store.finish_turn(
            lease,
            reply,
            outcome=outcome,
            also=also,
            release=release,
            jobs=jobs,
            scrub=scrub,
            closes=closes,
        )
        if p.jobs is not None and finished.jobs:
            p.jobs.recorded(finished.jobs)  # Committed: this runner looks at once.
        return finished.opened

    try:
        await audited(
            p,
            t.conversation_id,
            write,
            lambda opened: [*_stamped(t), *handoff.opened_events(opened)],
            lambda _: t.user_id,
            apart_if_joint_fails=True,  # The reply must land: a batch that cannot join waits.
        )
    except LeaseLost:  # Overtaken: typed as such, and none of the writes landed.
        raise
    except StoreError as e:  # The database is down: the turn failed, its outcome is kept.
        raise TurnFailed(str(e), user_message_id=t.user_message.id, stage="finish") from e
    return reply_from_records(p, t.user_message, reply, outcome, user_id=t.user_id)


async def _fail(p: Pipeline, t: Turn, error: Exception) -> None:
    """Leave the failed-turn marker (the safe reply) and audit the failure (the caller then
    sees `error`: `TurnFailed` for a failure the client should retry)."""
    stage = error.stage if isinstance(error, TurnFailed) else "orchestrator"
    safe = error.safe_reply if isinstance(error, TurnFailed) else SAFE_REPLY
    t.recorder.note("turn_failed", stage=stage, error=f"{type(error).__name__}: {error}")
    if isinstance(error.__cause__, ProviderQuotaExhausted):
        # Money ran out: every turn will fail until someone tops up, so say it loudly.
        log.error("alert.provider_quota_exhausted", model=error.__cause__.model, stage=stage)
    try:
        await p.store.mark_failed(t.user_message, safe, lease=t.lease)
    except Exception:  # The database is down too: the next turn may stack; ops see the log.
        log.exception("turn.marker_failed", conversation_id=t.conversation_id)
    if p.audit is not None:
        try:
            await p.audit.append(t.conversation_id, _stamped(t), user_id=t.user_id)
        except Exception:  # The turn's own error is the one the caller must see.
            log.exception("audit.failed_turn_not_written", conversation_id=t.conversation_id)


# -- after -------------------------------------------------------------------------------


def _jobs_after(p: Pipeline, t: Turn, reply: MessageRecord) -> list[JobSpec]:
    """The jobs a reply records in its own transaction: the memory expert learns from the
    user's message (only one that may state a fact: `memory.may_state_a_fact`); the
    summariser compacts a thread past its threshold (checked on the thread already in
    memory, so a turn under it costs no database read)."""
    jobs = []
    question = t.user_message
    if (
        p.memory is not None
        and t.user_id is not None
        and _memory.may_state_a_fact(question.content)
    ):
        jobs.append(_memory.learn_spec(t.user_id, question.id, p.memory.refs))
    after = [*t.thread.messages, ThreadMessage(role="assistant", content=reply.content)]
    if p.compaction_policy.plan(after, p.counter) is not None:
        jobs.append(compaction_spec(t.conversation_id, reply.id, p.profile))
    return jobs


# -- helpers -----------------------------------------------------------------------------


async def _owned_message(p: Pipeline, message_id: str, user_id: str | None) -> MessageRecord:
    """The message `message_id` if it is in a conversation of `user_id`.

    Raises:
        ConversationNotFound: the same for a missing message and another user's.
    """
    try:
        message = await p.store.get(message_id)
        await p.store.check_owner(message.conversation_id, user_id)
    except (MessageNotFound, ConversationNotFound):
        raise ConversationNotFound(
            f"no message {message_id!r} in a conversation of this user; check the message "
            "id and the user_id the conversation was started with",
            conversation_id=None,
            message_id=message_id,
        ) from None
    return message


def idempotency_key(conversation_id: str, user_message_id: str) -> str:
    """The turn's `HandlerContext.idempotency_key`: the same for every try of the message."""
    digest = hashlib.sha256(f"{conversation_id}\n{user_message_id}".encode())
    return digest.hexdigest()[:32]


def _step_key(t: Turn, step: int) -> str:
    """The idempotency key of the message's `step`-th request: the one its handler is given
    and the one its stored step carries (each request of a message with several has its own,
    `multi_intent.py`)."""
    return idempotency_key(t.conversation_id, t.user_message.id + (f"#{step}" if step else ""))


def reply_from_records(
    p: Pipeline,
    question: MessageRecord,
    reply: MessageRecord,
    outcome: TurnOutcome | None,
    *,
    replayed: bool = False,
    user_id: str | None = None,
) -> Reply:
    """The turn's `Reply`, built from what is stored (the same on a first try and a replay);
    its request shown as its field rules say (`Redact`)."""
    decided = None if outcome is None else _decided_from(p, outcome)
    return Reply(
        text=reply.content,
        category=None if outcome is None else outcome.category,
        request=None if decided is None else _shown(p, decided.request, user_id),
        need_more_info=None if decided is None else decided.missing,
        outcome=None if decided is None else decided.outcome,
        message_id=reply.id,
        user_message_id=question.id,
        conversation_id=question.conversation_id,
        usage={} if outcome is None else {e: Usage(**u) for e, u in outcome.usage.items()},
        models={} if outcome is None else dict(outcome.models),
        replayed=replayed,
        handoff=bool(decided and decided.outcome.handoff is not None)
        or reply.kind == "handoff"
        or reply.operator_id is not None,
        author=reply.author,
        sources=[] if outcome is None else _knowledge.from_json(outcome.sources),
        citations=[] if outcome is None else _knowledge.citations_from_json(outcome.sources),
        handler_failed=bool(decided and decided.handler_failed),
        reviewed=outcome is not None and "review" in outcome.models,
        routed_by=_routed_by({} if outcome is None else outcome.models),
        confirmation=None
        if outcome is None or not outcome.confirmation
        else confirmation.awaiting(outcome.confirmation),
        **_flow_fields(outcome),
    )


def _routed_by(called: Mapping[str, object]) -> Literal["router", "triage"]:
    """`Reply.routed_by` of a turn whose experts `called` names (its outcome's models, or
    the answers so far): `triage` exactly when the triage expert was called for it."""
    return "triage" if "triage" in called else "router"


def _flow_fields(outcome: TurnOutcome | None) -> dict[str, Any]:
    """`Reply.categories`, `clarify`, `pending`, `cancelled` and `language` from the
    stored flow (the same on a first try and a replay)."""
    flow = {} if outcome is None else (outcome.flow or {})
    categories = list(flow.get("categories") or ([outcome.category] if outcome else []))
    held = flow.get("pending")
    return {
        "categories": categories,
        "clarify": list(flow.get("clarify") or ()),
        "pending": None if not held else str(held["category"]),
        "cancelled": bool(flow.get("cancelled")),
        "language": flow.get("language"),
    }


def _decided_from(p: Pipeline, stored: TurnOutcome) -> Decided:
    """What `stored` decided, its instruction covering every step its message's flow
    stored (the store keeps the first step's own: `flows.combined`)."""
    category = p.categories.get(stored.category)
    request = None
    if stored.request is not None and category is not None and category.request is not None:
        request = model_of(category.request, stored.request)  # Scrubbed: `[PIN]` kept.
    missing = NeedMoreInfo.model_validate(stored.need_more_info) if stored.need_more_info else None
    decided = Decided(
        category=stored.category,
        request=request,
        missing=missing,
        outcome=Outcome(
            instruction=stored.instruction,
            data=stored.data,
            handoff=stored.handoff,
            resolves=stored.resolves,
            reply=stored.reply,
        ),
        handler_ran=stored.handler_ran,
        handler_failed=stored.handler_failed,
        answered={},
        earlier=stored,
        confirmation=stored.confirmation,
        flow=stored.flow,
    )
    return flows.combined(p.categories, decided)


def _stored(
    p: Pipeline, t: Turn, d: Decided, sources: Sequence[Passage] = (), cited: Sequence[str] = ()
) -> TurnOutcome:
    """`d` as the store keeps it (an earlier try's usage kept for the experts not rerun),
    with the passages its reply was given (those it cites marked); its ruled values
    shown, with `scrub_secrets`."""
    usage = dict(d.earlier.usage) if d.earlier else {}
    models = dict(d.earlier.models) if d.earlier else {}
    usage.update({e: usage_dict(r.usage) for e, r in d.answered.items()})
    models.update({e: r.model for e, r in d.answered.items()})
    return TurnOutcome(
        user_message_id=t.user_message.id,
        conversation_id=t.conversation_id,
        category=d.category,
        request=d.secrets.request
        if d.secrets is not None and p.secrets is not None and p.secrets.scrub
        else jsonable(d.request),
        need_more_info=jsonable(d.missing),
        instruction=flows.own(d).outcome.instruction,  # Steps after it: in the flow.
        data=jsonable(d.outcome.data),
        handler_ran=d.handler_ran,
        handoff=d.outcome.handoff,
        handler_failed=d.handler_failed,
        usage=usage,
        models=models,
        sources=_knowledge.to_json(sources, _knowledge.cited(sources, cited)[0]),
        resolves=d.outcome.resolves,
        confirmation=d.confirmation,
        reply=d.outcome.reply,
        flow=d.flow,
    )


async def _within_deadline(p: Pipeline, t: Turn, call: Awaitable[T], *, since: float) -> T:
    """Run expert calls under what is left of the turn deadline (a provider that hangs or a
    long retry-after never holds the caller, or the conversation's lease, past it).

    The deadline runs from `since` (`time.monotonic()` when the turn began waiting for its
    lease), so the lease wait counts against it."""
    remaining = None if p.deadline is None else p.deadline - (time.monotonic() - since)
    try:
        async with asyncio.timeout(remaining):
            return await call
    except TimeoutError as e:
        raise TurnFailed(
            f"the turn took longer than its {p.deadline} s deadline",
            user_message_id=t.user_message.id,
            stage="deadline",
        ) from e


def _shown(p: Pipeline, request: BaseModel | None, user_id: str | None) -> BaseModel | None:
    """`request` as people may see it (`Redact` rules applied)."""
    return request if p.secrets is None else p.secrets.shown_model(request, user_id)


def _secrets_of(p: Pipeline, t: Turn, request: BaseModel | None) -> TurnSecrets | None:
    """The request's ruled values in clear (`orchestrator/ruled_values.py`), or `None`."""
    if p.secrets is None:
        return None
    return p.secrets.of_turn(
        request,
        user_id=t.user_id,
        conversation_id=t.conversation_id,
        message_id=t.user_message.id,
    )


def _keeper(p: Pipeline, t: Turn) -> confirmation.Keeper | None:
    """How a `confirm` request's ruled values are held for the yes (`None`: no rules)."""
    if p.secrets is None:
        return None
    return confirmation.Keeper(
        vault=p.audit,
        user_id=t.user_id,
        conversation_id=t.conversation_id,
        secrets_of=lambda request: _secrets_of(p, t, request),
    )


def _scrub(p: Pipeline, t: Turn, secrets: TurnSecrets | None) -> Scrub | None:
    """What a turn with ruled values writes of them (`None`: a plain turn, nothing)."""
    if p.secrets is None or secrets is None:
        return None
    question = t.user_message
    return p.secrets.scrub_of(secrets, question.id, question.content, p.counter)


def _meta(t: Turn) -> dict[str, str]:
    return {"conversation_id": t.conversation_id, "turn_id": t.user_message.id}


def _view(p: Pipeline, t: Turn, expert: str) -> ExpertView:
    documents = t.documents if expert in ("request", "response") else ()  # Never triage.
    return t.thread.for_expert(
        expert,
        counter=p.counters[expert],
        budgets=p.budgets,
        memory=t.memory,
        documents=documents,
    )


def _turns(view: ExpertView) -> list[Message]:
    """The view's turns typed as model messages (the builder only makes these two roles,
    in dicts of exactly `role` and `content`: each is a `Message` as it is; their roles
    are checked in C, the list copied at once)."""
    if _MODEL_ROLES.issuperset(map(_role, view.messages)):
        return list(view.messages)  # type: ignore[arg-type]
    return [
        m  # type: ignore[misc]
        if m["role"] == "user" or m["role"] == "assistant"
        else Message(role="user", content=m["content"])
        for m in view.messages
    ]


_MODEL_ROLES = frozenset(("user", "assistant"))
_role = operator.itemgetter("role")


def app_record(
    spec: str | None,
    triage: TriageExpert,
    requests: Mapping[str, RequestExpert],
    response: ResponseExpert,
    profile: str | None = None,
) -> dict[str, object]:
    """The app as each turn's audit records it: its `--app` spec when it was loaded from
    one, the profile that answered, its categories with their request prompts' versions,
    and the triage and response prompts' versions (a replay loads the spec and answers
    with the same profile, or checks the categories)."""
    return {
        "spec": spec,
        "profile": profile,
        "categories": {
            name: f"{e.call.prompt.name}@{e.call.prompt.version}" for name, e in requests.items()
        },
        "triage": f"{triage.call.prompt.name}@{triage.call.prompt.version}",
        "response": f"{response.call.prompt.name}@{response.call.prompt.version}",
    }


def _prompt_versions(p: Pipeline, category: str, variant: str | None = None) -> dict[str, str]:
    """Which prompt versions produced this reply (kept on the assistant message), and the
    conversation's variant when it has one (what `frontdesk report --by variant` reads)."""
    versions = {
        "triage": p.triage.call.prompt.name + "@" + p.triage.call.prompt.version,
        "response": p.response.call.prompt.name + "@" + p.response.call.prompt.version,
    }
    if variant is not None:
        versions["variant"] = variant
    expert = p.requests.get(category)
    if expert is not None:
        versions["request"] = expert.call.prompt.name + "@" + expert.call.prompt.version
    return versions
