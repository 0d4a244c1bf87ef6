"""One turn, top to bottom: thread -> triage -> request -> handler -> response -> thread.

The machinery (model wiring, locks, idempotency, audit batching) lives in
`orchestrator/_orchestrator.py`; this module is the data flow of a turn and nothing else.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from frontdesk.experts import Category, HandlerContext, NeedMoreInfo, Outcome
from frontdesk.experts.category import HUMAN, OTHER
from frontdesk.experts.errors import ModelError, OutputValidationError, Refusal, TruncatedOutput
from frontdesk.experts.providers import Message, ModelResponse
from frontdesk.experts.request import RequestExpert
from frontdesk.experts.response import ResponseExpert, ResponseResult
from frontdesk.experts.triage import TriageExpert
from frontdesk.orchestrator import _listen, _outcomes
from frontdesk.orchestrator._recorder import TurnRecorder, jsonable
from frontdesk.orchestrator.errors import TurnFailed
from frontdesk.orchestrator.reply import Reply
from frontdesk.threads.budget import Budget
from frontdesk.threads.builder import ExpertView, UserThread
from frontdesk.threads.store import ConversationStore, MessageRecord
from frontdesk.threads.tokens import TokenCounter

# Errors about one answer's content: the route falls back to a person, the turn goes on.
T = TypeVar("T")

EXPERTS = ("triage", "request", "response")

CONTENT_ERRORS = (OutputValidationError, TruncatedOutput, Refusal, ValidationError)


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    """Everything a turn needs, built once by the Orchestrator."""

    store: ConversationStore
    categories: Mapping[str, Category]
    triage: TriageExpert
    requests: Mapping[str, RequestExpert]
    response: ResponseExpert
    context_extras: Mapping[str, object]
    counters: Mapping[str, TokenCounter]
    budgets: Mapping[str, Budget]


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One user message being answered."""

    conversation_id: str
    user_id: str | None
    user_message: MessageRecord
    thread: UserThread
    recorder: TurnRecorder


async def run_turn(p: Pipeline, t: Turn) -> Reply:
    """Answer `t.user_message` and store the reply under it."""
    views = {e: t.thread.for_expert(e, counter=p.counters[e], budgets=p.budgets) for e in EXPERTS}
    meta = {"conversation_id": t.conversation_id, "turn_id": t.user_message.id}
    answered: dict[str, ModelResponse] = {}  # expert -> the response it got, for the Reply

    category, reason = await _triage(p, t, views["triage"], meta, answered)
    t.recorder.note("triage", category=category, reason=reason)
    _listen.routed(category)

    request, missing = await _extract(p, t, category, views["request"], meta, answered)
    if category in p.requests:
        _listen.extracted(request, missing)
    t.recorder.note(
        "request", category=category, request=jsonable(request), need_more_info=jsonable(missing)
    )

    outcome = await _decide(p, t, category, request, missing)
    t.recorder.note(
        "outcome", category=category, instruction=outcome.instruction, data=jsonable(outcome.data)
    )

    answer = await _respond(p, t, views["response"], outcome.instruction, meta, answered)
    assistant = await p.store.add_assistant_message(
        t.user_message.id,
        answer.text,
        model=answer.response.model or None,
        prompt_versions=_prompt_versions(p, category),
    )
    t.recorder.note(
        "reply", assistant_message_id=assistant.id, text=answer.text, model=answer.response.model
    )
    return Reply(
        text=answer.text,
        category=category,
        request=request,
        need_more_info=missing,
        outcome=outcome,
        message_id=assistant.id,
        user_message_id=t.user_message.id,
        conversation_id=t.conversation_id,
        usage={expert: r.usage for expert, r in answered.items()},
        models={expert: r.model for expert, r in answered.items()},
    )


async def _triage(
    p: Pipeline, t: Turn, view: ExpertView, meta: dict[str, str], answered: dict[str, ModelResponse]
) -> tuple[str, str]:
    """The category, or `HUMAN` when the triage answer is unusable (a safe default)."""
    try:
        result = await _stage(
            "triage",
            t,
            p.triage.run(_turns(view), metadata=meta, cache_prefix=view.cache_prefix_messages),
            fallback=True,
        )
    except CONTENT_ERRORS as e:
        return HUMAN, f"triage answer unusable ({type(e).__name__}); handing off"
    answered["triage"] = result.response
    return result.category, result.reason


async def _extract(
    p: Pipeline,
    t: Turn,
    category: str,
    view: ExpertView,
    meta: dict[str, str],
    answered: dict[str, ModelResponse],
) -> tuple[BaseModel | None, NeedMoreInfo | None]:
    """The category's request, or what is missing; nothing for the built-ins."""
    expert = p.requests.get(category)
    if expert is None:
        return None, None
    try:
        result = await _stage(
            "request",
            t,
            expert.run(_turns(view), metadata=meta, cache_prefix=view.cache_prefix_messages),
            fallback=True,
        )
    except CONTENT_ERRORS as e:
        t.recorder.note("request_failed", category=category, error=f"{type(e).__name__}: {e}")
        return None, None
    answered["request"] = result.response
    return result.request, result.need_more_info


async def _respond(
    p: Pipeline,
    t: Turn,
    view: ExpertView,
    instruction: str,
    meta: dict[str, str],
    answered: dict[str, ModelResponse],
) -> ResponseResult:
    """The reply: the thread plus ONE assistant instruction message, sent to the response expert."""
    call = p.response.run(
        _turns(view),
        instruction,
        metadata=meta,
        cache_prefix=view.cache_prefix_messages,
        on_delta=_listen.delta_sink(),
    )
    answer = await _stage("response", t, call)
    answered["response"] = answer.response
    return answer


async def _decide(
    p: Pipeline, t: Turn, category: str, request: BaseModel | None, missing: NeedMoreInfo | None
) -> Outcome:
    """The handler's outcome ("TradCode"), or the built-in outcome for this route."""
    if category == HUMAN:
        return _outcomes.handoff()
    if category == OTHER:
        return _outcomes.small_talk(p.categories.values())
    if missing is not None:
        return _outcomes.ask_for(missing)
    if request is None:  # The extraction was unusable: a person is the safe route.
        return _outcomes.handoff()
    handler = p.categories[category].handler
    assert handler is not None
    context = HandlerContext(
        conversation_id=t.conversation_id,
        user_id=t.user_id,
        category=category,
        turn_id=t.user_message.id,
        store=p.store.handler_store(category),
        extras=p.context_extras,
    )
    try:
        outcome = await handler(request, context)
        if not isinstance(outcome, Outcome):
            raise TypeError(f"handler returned {type(outcome).__name__}, not experts.Outcome")
    except Exception as e:  # A handler is the developer's code: any failure is contained.
        t.recorder.note("handler_error", category=category, error=f"{type(e).__name__}: {e}")
        return _outcomes.handler_failed()
    return outcome


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


def _turns(view: ExpertView) -> list[Message]:
    """The view's turns typed as model messages (the builder only makes these two roles)."""
    return [
        Message(role="assistant" if m["role"] == "assistant" else "user", content=m["content"])
        for m in view.messages
    ]


def _prompt_versions(p: Pipeline, category: str) -> dict[str, str]:
    """Which prompt versions produced this reply (kept on the assistant message)."""
    versions = {
        "triage": p.triage.call.prompt.name + "@" + p.triage.call.prompt.version,
        "response": p.response.call.prompt.name + "@" + p.response.call.prompt.version,
    }
    expert = p.requests.get(category)
    if expert is not None:
        versions["request"] = expert.call.prompt.name + "@" + expert.call.prompt.version
    return versions
