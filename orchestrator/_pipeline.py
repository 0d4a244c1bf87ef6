"""What a turn carries: the pipeline built once at open, and each turn's own records.

`turn.py` tells the turn; these are the values it passes along (kept apart so the story
reads without 150 lines of fields at its end).
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from frontdesk.audit.store import AuditLog
from frontdesk.experts import Category, NeedMoreInfo, Outcome
from frontdesk.experts.providers import ModelResponse
from frontdesk.experts.request import RequestExpert
from frontdesk.experts.response import ResponseExpert
from frontdesk.experts.triage import TriageExpert
from frontdesk.frozen import quick_init
from frontdesk.jobs.runner import Jobs
from frontdesk.knowledge import Passage
from frontdesk.memory import Memory
from frontdesk.orchestrator import confirmation, fallbacks, handler_errors, pending, spend
from frontdesk.orchestrator import knowledge as _knowledge
from frontdesk.orchestrator import memory as _memory
from frontdesk.orchestrator import review as _review
from frontdesk.orchestrator import screen as _screen
from frontdesk.orchestrator._compaction import BackgroundCompaction
from frontdesk.orchestrator._recorder import TurnRecorder
from frontdesk.orchestrator._router import Router
from frontdesk.orchestrator.multi_intent import MultiIntent
from frontdesk.orchestrator.past_conversations import PastConversations
from frontdesk.orchestrator.ruled_values import Secrets
from frontdesk.ruled import TurnSecrets
from frontdesk.threads.budget import Budget, Document
from frontdesk.threads.builder import UserThread
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.handoff import HandoffPolicy
from frontdesk.threads.store import (
    ConversationStore,
    MessageRecord,
    Previous,
    TurnLease,
    TurnOutcome,
    TurnRecord,
)
from frontdesk.threads.tokens import TokenCounter

Extracted = tuple[BaseModel | None, NeedMoreInfo | None, tuple[str, ...], Mapping[str, Any]]
"""The request, or what is missing; the fields filled from a remembered fact; and, with
what is missing, the fields known so far."""


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    """Everything a turn needs, built once by the Orchestrator when it opens."""

    store: ConversationStore
    audit: AuditLog | None
    categories: Mapping[str, Category]
    triage: TriageExpert
    requests: Mapping[str, RequestExpert]
    response: ResponseExpert
    context_extras: Mapping[str, object]
    counters: Mapping[str, TokenCounter]
    budgets: Mapping[str, Budget]
    lease: Callable[[str], TurnLease]
    """A conversation's lease, not yet taken (the orchestrator's lock settings)."""
    handoff: HandoffPolicy
    """What a message sent while a person has the conversation gets, and the timeout."""
    counter: TokenCounter
    """Counts a stored message's tokens (the compaction policy reads them)."""
    compaction: BackgroundCompaction
    compaction_policy: CompactionPolicy
    deadline: float | None = None
    """Seconds the turn's expert calls may take in all (`None`: no deadline)."""
    speculate: bool = True
    """Start the request expert of the conversation's current category alongside triage
    (`speculation.py`); off, the two run one after the other."""
    memory: _memory.Memories | None = None
    """The users' long-term memory (`None`: none is read or written)."""
    knowledge: _knowledge.Library | None = None
    """The business's documents (`None`: no turn reads any)."""
    past: PastConversations | None = None
    """Keeps a handed-back conversation's summary as a memory of its user."""
    jobs: Jobs | None = None
    """The background jobs: a reply records its own in its transaction (docs/jobs.md)."""
    app: Mapping[str, object] = dataclasses.field(default_factory=dict)
    """What the audit records of the app with each turn (`app_record`)."""
    handler_errors: handler_errors.HandlerErrors = "reply"
    """A handler's failure: the apology (`reply`) or `HandlerFailed` (`raise`)."""
    secrets: Secrets | None = None
    """Ruled request values (`Redact`): shown as their rules say, scrubbed from what is kept
    (`None`: no category's request has a rule that changes a value)."""
    variants: Mapping[str, tuple[TriageExpert, ResponseExpert]] = dataclasses.field(
        default_factory=dict
    )
    """Variant name -> its triage and response experts (`Orchestrator(variants=...)`)."""
    on_unreadable: fallbacks.Unreadable = "ask"
    """An unreadable triage or request answer: ask the customer again (`ask`, a hand-off
    after three in a row) or hand off at once (`handoff`)."""
    profile: str | None = None
    """The profile (business) answering: recorded on a new conversation by its first
    transaction, checked on an existing one (`ProfileMismatch`)."""
    confirm_ttl: datetime.timedelta = confirmation.DEFAULT_TTL
    """How long a request of a `confirm` category waits for the customer's yes."""
    screen: _screen.ScreenFunction | None = None
    """The app's check of each message before triage (`None`: none)."""
    screen_mode: _screen.ScreenMode = "enforce"
    """`enforce` acts on the screen's verdict; `shadow` only audits and counts it."""
    spend_limit: spend.SpendLimit | None = None
    """Tokens and cost per user or conversation over a window (`None`: no limit)."""
    review: _review.Review | None = None
    """The review expert that checks each draft reply (`None`: none)."""
    multi_intent: MultiIntent = "sequential"
    """A message with several requests: handled in turn (`sequential`) or asked about."""
    languages: tuple[str, ...] | None = None
    """The languages the bot answers in (`None`: the customer's, whichever it is)."""
    pending_ttl: datetime.timedelta = pending.DEFAULT_TTL
    """How long a request in progress waits for the customer to come back to it."""
    router: Router | None = None
    """The router in front of triage (`pre_triage.py`; `None`: triage routes every message)."""

    @functools.cached_property
    def confirms(self) -> bool:
        """Whether any category asks for confirmation (`Category.confirm`)."""
        return any(c.confirm is not False for c in self.categories.values())


@dataclass(frozen=True, kw_only=True)
class Started:
    """What a turn's start read and wrote: the question, its thread, what is stored of it."""

    question: MessageRecord
    user_id: str | None
    thread: UserThread
    stored: TurnRecord
    """The question's reply and outcome from an earlier try (both `None` for a new one)."""
    answered_now: bool = False
    """The start itself stored `stored.reply`: a message kept for a person (hand-off)."""
    memories: Sequence[Memory] | None = None
    """The user's facts for the question, when the start looked them up alongside its own
    transaction (`None`: the turn looks them up after the start)."""
    previous_category: str | None = None
    """The route of the turn before, when the start read it (`guessed`)."""
    guessed: bool = False
    """The start read `previous_category` in its own transaction: no read for the guess."""
    passages: Sequence[Passage] | None = None
    """The business's passages for the question, read the same way (`None`: looked up after
    the start)."""
    previous: Previous | None = None
    """The turn before (its category and confirmation), when the start read it (`guessed`)."""


Start = Callable[[TurnLease], Awaitable[Started]]
"""A turn's first transaction (new message, edit or regeneration), under the given lease."""


@quick_init
@dataclass(frozen=True, kw_only=True)
class Turn:
    """One user message being answered."""

    conversation_id: str
    user_id: str | None
    user_message: MessageRecord
    thread: UserThread
    recorder: TurnRecorder
    lease: TurnLease
    """The conversation's lease: every write of the turn is fenced by it."""
    memory: Sequence[Document] = ()
    """The user's facts for this turn, ranked (each expert's budget keeps what fits)."""
    previous_category: str | None = None
    """The route of the turn before, when the start read it (`guessed`)."""
    guessed: bool = False
    """The start read `previous_category`: the speculation needs no read of its own."""
    passages: Sequence[Passage] = ()
    """The business's passages for the question, best first."""
    documents: Sequence[Document] = ()
    """`passages` as ranked budget items (the response expert's budget keeps what fits)."""
    variant: str | None = None
    """The conversation's prompt variant, stamped on every audit event of the turn."""
    pending: confirmation.Pending | None = None
    """The request the turn before asked the customer to confirm (`confirmation.py`)."""
    before: Mapping[str, Any] | None = None
    """The turn before's `TurnOutcome.flow`: the request in progress it left, the
    categories it asked the customer to choose between, its language (`pending.py`)."""

    @property
    def previous_question(self) -> str | None:
        """The id of the user message answered before this one on the thread, if any."""
        for m in reversed(self.thread.messages[:-1]):
            if m.role == "user" and m.message_id is not None:
                return m.message_id
        return None


@quick_init
@dataclass(frozen=True, kw_only=True)
class Decided:
    """What the experts before the reply decided (or what an earlier try stored)."""

    category: str
    request: BaseModel | None
    missing: NeedMoreInfo | None
    outcome: Outcome
    handler_ran: bool
    answered: dict[str, ModelResponse]
    """Expert -> the response it got in this try."""
    handler_failed: bool = False
    """The handler raised; `outcome` is the library's apology."""
    earlier: TurnOutcome | None = None
    """The stored outcome this turn reuses, if any."""
    secrets: TurnSecrets | None = None
    """The request's ruled values in clear (`None`: it has none, or a reused outcome)."""
    confirmation: dict[str, Any] | None = None
    """The request held for the customer's yes, or the answer to one (`confirmation.py`)."""
    flow: dict[str, Any] | None = None
    """The turn's place in the conversation (`TurnOutcome.flow`: `pending.py`)."""
    known: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """With `missing`: the fields the customer has given so far."""
