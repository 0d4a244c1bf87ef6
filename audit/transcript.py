"""Transcript views built from the audit rows alone: turns, decisions and expert calls.

`audit` never imports `threads`, so the active path is rebuilt from what the rows say:
each `turn_started` names its user message's parent (the assistant message it answers),
each `reply` names the assistant message it stored. Walking back from the newest turn
through those links gives the path the user sees; edits and regenerations are the turns
left off it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from frontdesk.audit.chain import AuditRow
from frontdesk.audit.pricing import Cost, cost_of


@dataclass(frozen=True)
class Tokens:
    """Token counts, as the providers reported them."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        """Every token, cached or not."""
        return self.input + self.output + self.cache_read + self.cache_write

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
        )

    @classmethod
    def of(cls, usage: dict[str, Any] | None) -> Tokens:
        """Read a payload's `usage` dict (missing fields are 0)."""
        u = usage or {}
        return cls(
            int(u.get("input_tokens") or 0),
            int(u.get("output_tokens") or 0),
            int(u.get("cache_read_tokens") or 0),
            int(u.get("cache_write_tokens") or 0),
        )


def _add_costs(costs: Iterable[Cost]) -> Cost:
    items = list(costs)
    return Cost(sum(c.usd for c in items), all(c.known for c in items))


@dataclass(frozen=True)
class Attempt:
    """One HTTP attempt of an expert call (one `model_attempt` row)."""

    seq: int
    number: int
    model: str
    tokens: Tokens
    cost: Cost
    latency_ms: float
    status_code: int | None
    error: str | None
    stop_reason: str | None
    provider_request_id: str | None
    prompt: dict[str, Any] | None
    system_prompt: str | None
    messages: list[dict[str, Any]]
    request_body: Any
    response_body: Any
    output: Any
    speculation: str | None = None
    """`kept` or `discarded` for a speculative request call, else `None`."""
    documents: list[dict[str, Any]] = field(default_factory=list)
    """The passages sent (id, source, title, version, sha256); their text is in `messages`."""

    @classmethod
    def of(cls, row: AuditRow) -> Attempt:
        """Read a `model_attempt` row."""
        p = row.payload
        model = str(p.get("model") or "")
        tokens = Tokens.of(p.get("usage"))
        stored = p.get("cost_usd")
        cost = (
            Cost(float(stored), True)
            if isinstance(stored, int | float)
            else cost_of(
                model,
                input_tokens=tokens.input,
                output_tokens=tokens.output,
                cache_read_tokens=tokens.cache_read,
                cache_write_tokens=tokens.cache_write,
            )
        )
        return cls(
            seq=row.seq,
            number=int(p.get("attempt") or 1),
            model=model,
            tokens=tokens,
            cost=cost,
            latency_ms=float(p.get("latency_ms") or 0.0),
            status_code=p.get("status_code"),
            error=p.get("error"),
            stop_reason=p.get("stop_reason"),
            provider_request_id=p.get("provider_request_id"),
            prompt=p.get("prompt"),
            system_prompt=row.system_prompt,
            messages=list(p.get("messages") or []),
            request_body=p.get("request_body"),
            response_body=p.get("response_body"),
            output=p.get("output"),
            speculation=p.get("speculation"),
            documents=list(p.get("documents") or []),
        )


@dataclass
class ExpertCall:
    """One expert call: its attempts (retries and fallbacks included), in order."""

    expert: str
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def model(self) -> str:
        """The model of the last attempt (the one that answered, or failed last)."""
        return self.attempts[-1].model

    @property
    def tokens(self) -> Tokens:
        """Tokens over all attempts."""
        return sum((a.tokens for a in self.attempts), Tokens())

    @property
    def cost(self) -> Cost:
        """Cost over all attempts."""
        return _add_costs(a.cost for a in self.attempts)

    @property
    def latency_ms(self) -> float:
        """Time spent in attempts."""
        return sum(a.latency_ms for a in self.attempts)

    @property
    def ok(self) -> bool:
        """Whether the last attempt succeeded."""
        return self.attempts[-1].error is None

    @property
    def output(self) -> Any:
        """The parsed output of the last attempt."""
        return self.attempts[-1].output

    @property
    def speculation(self) -> str | None:
        """`kept` or `discarded` for the request expert's speculative call (started beside
        triage), else `None`; a discarded call's answer, or error, was never used."""
        return self.attempts[-1].speculation


@dataclass
class TurnView:
    """One turn as the audit log recorded it."""

    turn_id: str
    started_at: str = ""
    user_text: str | None = None
    parent_id: str | None = None
    parent_known: bool = False
    """Whether `turn_started` named the parent (older rows may not)."""
    user_id: str | None = None
    category: str | None = None
    reason: str | None = None
    request: dict[str, Any] | None = None
    need_more_info: dict[str, Any] | None = None
    request_from_memory: list[str] = field(default_factory=list)
    """The request's fields the request expert filled from a remembered fact."""
    request_error: str | None = None
    instruction: str | None = None
    outcome_data: dict[str, Any] | None = None
    handler_error: str | None = None
    handler_traceback: str | None = None
    """The failed handler's traceback (rows written before it was recorded have none)."""
    reply_text: str | None = None
    assistant_message_id: str | None = None
    failure: dict[str, Any] | None = None
    calls: list[ExpertCall] = field(default_factory=list)
    routed: dict[str, Any] | None = None
    """The router's decision (`EmbeddingRouter`: by, category, embedder, scores), if any."""
    events: list[str] = field(default_factory=list)
    """Other events of the turn (compaction, ...), as `kind: detail` lines."""
    started: bool = False
    """Whether a `turn_started` row opened it (a user turn, not background work)."""
    ended_at: str = ""
    """When its last row was recorded."""
    author: str = "bot"
    """Who wrote the reply: `bot`, or `operator:<id>` for a person's (hand-off)."""
    held: bool = False
    """The user message was kept for a person (a hand-off): no expert was called, and the
    reply is the waiting message (until an operator's reply superseded it)."""
    waiting_text: str | None = None
    """The waiting message the user was shown before an operator's reply superseded it."""
    handoff_events: list[str] = field(default_factory=list)
    """The turn's hand-off events in order (`hand_off: reason`, `hand_back: by`, ...)."""
    app: dict[str, Any] | None = None
    """The application that answered (`turn_started`'s `app`: its `spec` when known, and
    its categories with their prompt versions), for a replay to load or check."""
    waited_ms: float = 0.0
    """How long the user waited for a person (from the hand-off to the operator's reply or
    the timeout): part of `wall_ms`, but no model's or frontdesk's time."""
    wait_from: str = ""
    """When the hand-off the turn waits on began (while it is still open)."""
    flow: dict[str, Any] | None = None
    """How the turn was routed and in which language it was answered (the `outcome`
    event's `flow`: docs/conversations.md); `None` for turns recorded before."""

    @property
    def working_ms(self) -> float:
        """`wall_ms` without the wait for a person: what the system itself took."""
        return max(self.wall_ms - self.waited_ms, self.latency_ms)

    @property
    def wall_ms(self) -> float:
        """Wall-clock time from its first row to its last: model calls, handler, and the
        waits between retried attempts (which `latency_ms` leaves out)."""
        try:
            start = datetime.fromisoformat(self.started_at)
            end = datetime.fromisoformat(self.ended_at)
        except ValueError:
            return self.latency_ms
        return max((end - start).total_seconds() * 1000, self.latency_ms)

    @property
    def is_compaction(self) -> bool:
        """Background summarising recorded under a message id: not a turn of the user."""
        return not self.started and (
            any(line.startswith("compaction") for line in self.events)
            or (bool(self.calls) and all(c.expert == "summariser" for c in self.calls))
        )

    @property
    def tokens(self) -> Tokens:
        """Tokens over every call of the turn."""
        return sum((c.tokens for c in self.calls), Tokens())

    @property
    def cost(self) -> Cost:
        """Cost over every call of the turn."""
        return _add_costs(c.cost for c in self.calls)

    @property
    def latency_ms(self) -> float:
        """Time spent in model calls."""
        return sum(c.latency_ms for c in self.calls)

    def add_attempt(self, attempt: Attempt, expert: str) -> None:
        """File an attempt under the call it belongs to (a new call when it starts over)."""
        last = self.calls[-1] if self.calls else None
        if (
            last is None
            or last.expert != expert
            or attempt.number <= last.attempts[-1].number
            or last.ok
        ):
            self.calls.append(ExpertCall(expert))
        self.calls[-1].attempts.append(attempt)


@dataclass
class Transcript:
    """A conversation's turns, and which of them form the active path."""

    conversation_id: str
    turns: list[TurnView]
    """The user's turns, branches included (compactions are not turns)."""
    active: list[TurnView]
    compactions: list[TurnView] = field(default_factory=list)
    """Background compactions (summariser calls), kept apart so they are not numbered as
    turns; their cost is still counted."""

    @property
    def tokens(self) -> Tokens:
        """Tokens over every turn, branches and compactions included."""
        return sum((t.tokens for t in [*self.turns, *self.compactions]), Tokens())

    @property
    def cost(self) -> Cost:
        """Cost over every turn, branches and compactions included."""
        return _add_costs(t.cost for t in [*self.turns, *self.compactions])


def _apply(turn: TurnView, row: AuditRow) -> None:
    """Fold one row into its turn."""
    if row.kind in ("hand_off", "handoff_held") and not turn.wait_from:
        turn.wait_from = row.created_at
    elif row.kind in ("operator_reply", "handoff_timeout"):
        turn.waited_ms += _ms_between(turn.wait_from or turn.ended_at, row.created_at)
        turn.wait_from = ""
    turn.ended_at = row.created_at
    p = row.payload
    kind = row.kind
    if kind == "turn_started":
        turn.started = True
        turn.started_at = row.created_at
        turn.user_text = p.get("text")
        turn.parent_id = p.get("parent_id")
        turn.parent_known = "parent_id" in p
        turn.user_id = p.get("user_id")
        app = p.get("app")
        turn.app = app if isinstance(app, dict) else None
    elif kind == "model_attempt":
        turn.add_attempt(Attempt.of(row), str(p.get("expert") or "?"))
    elif kind == "triage":
        turn.category, turn.reason = p.get("category"), p.get("reason")
    elif kind in ("request", "outcome") and p.get("step"):  # A later request of the message.
        turn.events.append(f"{kind} (request {int(p['step']) + 1}): {p.get('category')}")
    elif kind in ("request", "outcome"):
        _apply_decision(turn, kind, p)
    elif kind == "request_failed" and p.get("speculation") == "discarded":
        # The speculative extraction's failure: its answer was never used by the turn.
        turn.events.append(f"speculative request (discarded): {p.get('error') or ''}".rstrip(": "))
    elif kind == "request_failed":
        turn.request_error = p.get("error")
    elif kind == "speculation":
        used = "kept" if p.get("kept") else "discarded"
        turn.events.append(
            f"speculation: request for {p.get('category')} {used}"
            + ("" if p.get("kept") else f" (triage chose {p.get('triage_category') or '-'})")
        )
    elif kind == "handler_error":
        turn.handler_error, turn.handler_traceback = p.get("error"), p.get("traceback")
    elif kind == "reply":
        turn.reply_text, turn.assistant_message_id = p.get("text"), p.get("assistant_message_id")
    elif kind == "turn_failed":
        turn.failure = dict(p)
    elif kind in HANDOFF_KINDS:
        _apply_handoff(turn, kind, p)
    else:
        _apply_other(turn, kind, p)


def _apply_other(turn: TurnView, kind: str, p: dict[str, Any]) -> None:
    """An event shown as a `kind: detail` line; the router's decision is also kept whole
    (`audit replay` computes it again)."""
    if kind == "routed":
        turn.routed = dict(p)
        scores = p.get("scores") or {}
        best = ", ".join(f"{name} {score:.3f}" for name, score in list(scores.items())[:3])
        detail = f"by {p.get('by')}" + (f" ({p.get('rule')})" if p.get("rule") else "")
        turn.events.append(f"routed: {detail}" + (f"; {best}" if best else ""))
        return
    detail = p.get("error") or p.get("summary_id") or ""
    turn.events.append(f"{kind}: {detail}".rstrip(": "))


def _apply_decision(turn: TurnView, kind: str, p: dict[str, Any]) -> None:
    """A `request` or `outcome` row (the turn's first request: its own)."""
    if kind == "request":
        turn.request, turn.need_more_info = p.get("request"), p.get("need_more_info")
        turn.request_from_memory = list(p.get("from_memory") or [])
        return
    turn.instruction, turn.outcome_data = p.get("instruction"), p.get("data")
    turn.flow = p.get("flow")
    if turn.category is None or (turn.flow and turn.flow.get("how") != "triage"):
        turn.category = p.get("category")  # Routed by rule, without triage (issue 44).


def _ms_between(start: str, end: str) -> float:
    """Milliseconds from one canonical timestamp to another (0 when either is unknown)."""
    try:
        delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    except ValueError:
        return 0.0
    return max(delta.total_seconds() * 1000, 0.0)


HANDOFF_KINDS = frozenset(
    {
        "hand_off",
        "handoff_claimed",
        "handoff_held",
        "operator_reply",
        "handoff_timeout",
        "hand_back",
    }
)
"""The events of a hand-off to a person (see `audit/events.py`)."""


def _apply_handoff(turn: TurnView, kind: str, p: dict[str, Any]) -> None:
    """Fold a hand-off event into its turn (the turn of the message it follows).

    An operator's reply (or a timeout's message) that answers the turn's user message
    supersedes the waiting message as the turn's reply; one that follows another assistant
    message is a turn of its own, linked to that message as its parent.
    """
    if kind == "hand_off":
        turn.handoff_events.append(f"hand_off: {p.get('reason') or ''}".rstrip(": "))
    elif kind == "hand_back":
        by = p.get("by") or ""
        if p.get("operator_id"):
            by = f"{by} {p['operator_id']}"
        turn.handoff_events.append(f"hand_back: {by}".rstrip(": "))
    elif kind == "handoff_claimed":
        claimant = str(p.get("operator_id") or "")
        if p.get("previous"):
            claimant += f" (transfer from {p['previous']})"
        turn.handoff_events.append(f"handoff_claimed: {claimant}".rstrip(": "))
    elif kind == "handoff_held":
        turn.held = True
        turn.reply_text, turn.assistant_message_id = p.get("text"), p.get("assistant_message_id")
    else:  # operator_reply, handoff_timeout: an assistant message written during a hand-off
        if turn.reply_text is not None and p.get("superseded"):
            turn.waiting_text = turn.reply_text
        if not turn.started:
            turn.parent_id, turn.parent_known = p.get("parent_id"), True
        turn.reply_text, turn.assistant_message_id = p.get("text"), p.get("assistant_message_id")
        operator = p.get("operator_id")
        turn.author = f"operator:{operator}" if kind == "operator_reply" else "bot"
        if kind == "handoff_timeout":
            turn.handoff_events.append("handoff_timeout: nobody answered in time")


def build_transcript(conversation_id: str, rows: Sequence[AuditRow]) -> Transcript:
    """Group a conversation's rows (in seq order) into turns and pick the active path."""
    turns: list[TurnView] = []
    open_turns: dict[str, TurnView] = {}
    for row in rows:
        if row.kind == "revealed":  # Who was shown it unredacted: not a turn.
            continue
        turn = open_turns.get(row.turn_id)
        if turn is None or row.kind == "turn_started":
            turn = TurnView(turn_id=row.turn_id, started_at=row.created_at)
            turns.append(turn)
            open_turns[row.turn_id] = turn
        _apply(turn, row)
    user_turns = [t for t in turns if not t.is_compaction]
    compactions = [t for t in turns if t.is_compaction]
    earlier: dict[str, TurnView] = {}
    for turn in user_turns:
        if turn.turn_id in earlier:
            _inherit(turn, earlier[turn.turn_id])
        earlier[turn.turn_id] = turn
    return Transcript(conversation_id, user_turns, active_path(user_turns), compactions)


_DECISIONS = (
    "category",
    "reason",
    "request",
    "need_more_info",
    "request_from_memory",
    "instruction",
    "outcome_data",
)
"""What a turn decided before its reply: a regeneration reuses them, and records none."""


def _inherit(turn: TurnView, before: TurnView) -> None:
    """A turn of the same user message again (a regeneration, a retry) that reused the
    stored outcome shows the decisions it reused, not an empty turn."""
    for name in _DECISIONS:
        if not getattr(turn, name) and getattr(before, name):
            setattr(turn, name, getattr(before, name))


def active_path(turns: Sequence[TurnView]) -> list[TurnView]:
    """The newest turn and the turns its messages answer, oldest first."""
    if not turns:
        return []
    if not turns[-1].parent_known:
        # No links recorded: every turn in order, a regenerated turn only once (its newest).
        newest = {t.turn_id: t for t in turns}
        return [t for t in turns if newest[t.turn_id] is t]
    by_reply = {t.assistant_message_id: t for t in turns if t.assistant_message_id}
    path = [turns[-1]]
    seen = {id(turns[-1])}
    while path[-1].parent_id is not None:
        previous = by_reply.get(path[-1].parent_id)
        if previous is None or id(previous) in seen:
            break
        path.append(previous)
        seen.add(id(previous))
    return path[::-1]
