"""The replay runner: re-run a recorded turn's experts with new prompts or models.

`audit.replay` compares; this module re-runs, because only the orchestrator knows the
experts. A replay builds a second `Orchestrator` from the application's categories and
settings, with the prompts folder and models asked for and auditing off, and feeds each
expert the messages it was sent, from its own audit rows (each expert has its own budget,
so each was sent its own cut of the thread). Handlers are never called (they act on the world:
orders, refunds); when the route and request are unchanged the recorded instruction is
reused, built-in routes get their built-in instruction, and otherwise the reply is not
re-run and the diff says so. `models="recorded"` answers every call from the recorded
responses, so a replay makes no model call at all.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from frontdesk.audit.replay import RecordedTurn, ReplayResult
from frontdesk.errors import ConfigError, ReplayError
from frontdesk.experts import NeedMoreInfo
from frontdesk.experts.category import HUMAN, OTHER, Category
from frontdesk.experts.providers import FunctionModel, Message, ModelRequest
from frontdesk.experts.router import EmbeddingRouter, RouteDecision, RouterIndex, text_key
from frontdesk.orchestrator import Orchestrator, fallbacks
from frontdesk.orchestrator.turn import CONTENT_ERRORS

EXPERTS = ("triage", "request", "response", "summariser")


@dataclass
class RecordedResponses:
    """Answers each expert call from the current turn's recorded outputs, in order."""

    turn: RecordedTurn | None = None
    _used: dict[str, int] = field(default_factory=dict)

    def start(self, turn: RecordedTurn) -> None:
        """Serve `turn`'s recorded outputs from now on."""
        self.turn, self._used = turn, {}

    def answer(self, request: ModelRequest) -> Any:
        """The next recorded output of `request.expert` in this turn."""
        assert self.turn is not None
        outputs = self.turn.outputs(request.expert)
        index = self._used.get(request.expert, 0)
        if index >= len(outputs):
            raise ReplayError(
                f"turn {self.turn.number} of {self.turn.conversation_id!r} has no recorded"
                f" {request.expert} response to replay (the route changed); replay with a"
                " model instead of `recorded`"
            )
        self._used[request.expert] = index + 1
        return outputs[index]


def _as_recorded(value: BaseModel | None) -> dict[str, Any] | None:
    """A parsed output in the JSON form the turn recorded it in."""
    return None if value is None else value.model_dump(mode="json")


@dataclass
class ReplayRouter:
    """The app's `EmbeddingRouter` over its categories, the vectors embedded in this
    process (a replay keeps none in the store)."""

    router: EmbeddingRouter
    categories: Sequence[Category]
    _index: RouterIndex | None = None

    async def decide(self, text: str) -> RouteDecision:
        """The router's decision on one message, as the turn's router made it.

        Raises:
            ModelError: the embedder failed.
        """
        if self._index is None:
            texts = self.router.texts(self.categories)
            keys = {text_key(t): t for each in texts.values() for t in each}
            made = await self.router.embedder.embed(list(keys.values()))
            self._index = self.router.index(texts, dict(zip(keys, made, strict=True)))
        (vector,) = await self.router.embedder.embed([text])
        return self._index.decide(vector)


def _sent(turn: RecordedTurn, expert: str) -> list[Message]:
    """What `expert` was sent in the recorded turn; triage's cut when it was not called
    then (the route changed), the nearest record of the thread there is."""
    recorded = turn.sent(expert)
    messages = turn.messages if recorded is None else recorded
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def parse_models(specs: list[str]) -> dict[str, str] | Literal["recorded"] | None:
    """`--model` values: `recorded`, `EXPERT=SPEC` (repeatable), or one SPEC for all.

    Raises:
        ConfigError: an unknown expert name, or `recorded` mixed with other values.
    """
    if not specs:
        return None
    if "recorded" in specs:
        if len(specs) > 1:
            raise ConfigError(
                "--model recorded replays every expert from the record; give it alone"
            )
        return "recorded"
    models: dict[str, str] = {}
    for spec in specs:
        expert, sep, value = spec.partition("=")
        if not sep:
            models["default"] = spec
            continue
        if expert not in (*EXPERTS, "default"):
            raise ConfigError(
                f"--model {spec!r}: unknown expert {expert!r}; use one of {EXPERTS} or default"
            )
        models[expert] = value
    return models


@dataclass
class ReplayRunner:
    """Re-runs recorded turns with a replay-configured orchestrator (auditing off)."""

    orchestrator: Orchestrator
    recorded: RecordedResponses | None = None
    router: ReplayRouter | None = None
    """The app's router (`EmbeddingRouter`), its decisions computed again from the text."""

    async def __call__(self, turn: RecordedTurn) -> ReplayResult:
        """Re-run triage, extraction and the reply for one recorded turn."""
        if self.recorded is not None:
            self.recorded.start(turn)
        triage, requests, response = self.orchestrator.experts
        meta = {"conversation_id": turn.conversation_id, "turn_id": turn.view.turn_id}
        flow = turn.view.flow or {}
        category: str | None = None
        candidates: tuple[str, ...] = ()
        if flow.get("how", "triage") != "triage" and turn.view.category is not None:
            # Routed by rule (a request in progress, an answer to "which?", a cancel, a
            # confirmation): the recorded decision, reproduced without a triage call.
            category = turn.view.category
        else:
            category, candidates = await self._routed(turn)
        if category is None:
            asked = triage.for_message(turn.view.user_text or "", candidates)
            try:
                category = (await asked.run(_sent(turn, "triage"), metadata=meta)).category
            except CONTENT_ERRORS:
                category = HUMAN
        request: dict[str, Any] | None = None
        missing: dict[str, Any] | None = None
        expert = requests.get(category)
        if expert is not None:
            try:
                extracted = await expert.run(_sent(turn, "request"), metadata=meta)
                request = _as_recorded(extracted.request)
                missing = _as_recorded(extracted.need_more_info)
            except CONTENT_ERRORS:
                pass
        instruction, note = self._instruction(turn, category, request, missing, expert is None)
        reply = None
        if instruction is not None:
            sent = _sent(turn, "response")
            reply = (await response.run(sent, instruction, metadata=meta)).text
        return ReplayResult(category, request, missing, reply, note)

    async def _routed(self, turn: RecordedTurn) -> tuple[str | None, tuple[str, ...]]:
        """The router's decision computed again (with the same embedder): a category routed
        with no triage call, or the candidates triage chooses among (`pre_triage.py`);
        nothing without a router."""
        routed = turn.view.routed
        if self.router is None or routed is None:
            return None, ()
        decision = await self.router.decide(turn.view.user_text or "")
        return decision.category, decision.candidates

    def _instruction(
        self,
        turn: RecordedTurn,
        category: str,
        request: dict[str, Any] | None,
        missing: dict[str, Any] | None,
        builtin: bool,
    ) -> tuple[str | None, str | None]:
        """The response expert's instruction, without calling any handler."""
        view = turn.view
        flow = view.flow or {}
        if (flow.get("clarify") or flow.get("cancelled")) and category == view.category:
            return view.instruction, None  # A question of which, or a cancellation: no handler.
        if category == HUMAN or (not builtin and request is None and missing is None):
            return fallbacks.handoff("replay").instruction, None
        if category == OTHER:
            return fallbacks.small_talk(self.orchestrator.categories.values()).instruction, None
        if missing is not None:
            return fallbacks.ask_for(NeedMoreInfo.model_validate(missing)).instruction, None
        if category == view.category and request == view.request and view.instruction:
            return view.instruction, None
        return None, "reply not re-run: the route changed and handlers are not called in replay"


def build_runner(
    app: Orchestrator,
    *,
    prompts_dir: Path | None = None,
    models: Mapping[str, Any] | Literal["recorded"] | None = None,
    profile: str | None = None,
) -> ReplayRunner:
    """A runner re-running turns with `app`'s categories and the given prompts and models.

    Args:
        app: The application's orchestrator (its categories, settings and models).
        profile: The profile of `app` the turns were recorded with (the app record's
            `profile`; `None` or one `app` lacks: its first).
        prompts_dir: A folder of prompt files replacing the app's (`--prompts`).
        models: Per-expert specs replacing the app's (`"default"` for all), or
            `"recorded"` to answer every call from the recorded responses.
    """
    recorded = RecordedResponses() if models == "recorded" else None
    name = profile if profile is not None and profile in app.profiles else next(iter(app.profiles))
    business = app.profiles[name]
    wired = app._wired[name].models  # The app's own models for that profile, as wired.
    choice: dict[str, Any] = dict(wired)
    if recorded is not None:
        double = FunctionModel(recorded.answer, name="recorded")
        choice = dict.fromkeys(EXPERTS, double)
    elif isinstance(models, Mapping) and models:
        default = models.get("default")
        choice = {e: models.get(e, default) or wired[e] for e in EXPERTS}
    replay = Orchestrator(
        list(business.categories),
        model=choice,
        audit=False,
        prompts_dir=prompts_dir or business.prompts,
        settings=business.settings,
        business_name=business.business_name,
        max_message_chars=business.max_message_chars,
        budgets=business.budgets,
    )
    router = None
    if business.router is not None:
        router = ReplayRouter(business.router, list(business.categories))
    return ReplayRunner(replay, recorded, router)
