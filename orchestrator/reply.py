"""`Reply`: what `Orchestrator.handle` returns to the embedding bot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel

from frontdesk.experts import NeedMoreInfo, Outcome
from frontdesk.experts.providers import Usage
from frontdesk.frozen import quick_init
from frontdesk.knowledge import Passage


@quick_init
@dataclass(frozen=True, kw_only=True)
class Reply:
    """One answered turn."""

    text: str
    """The reply to show the user."""
    category: str | None
    """The triage expert's category (`None` only for a replay whose audit is off)."""
    request: BaseModel | None
    """The extracted request, or `None` (no handler category, or more info needed)."""
    message_id: str
    """The assistant message's id (for `regenerate`)."""
    user_message_id: str
    """The user message's id (for `edit`)."""
    conversation_id: str
    need_more_info: NeedMoreInfo | None = None
    """What the request expert found missing, when it did."""
    outcome: Outcome | None = None
    """The handler's outcome (its `data` is for the bot: order ids, hand-off flags)."""
    usage: Mapping[str, Usage] = field(default_factory=dict)
    """Token usage per expert for this turn."""
    replayed: bool = False
    """True when this reply was stored earlier under the same client_message_id."""
    models: Mapping[str, str] = field(default_factory=dict)
    """Which model answered each expert (`offline` marks the stand-in)."""
    handoff: bool = False
    """Whether a person has the conversation: this turn handed it to one (routed to a
    person), or the message was kept for one (stored, no model call; `text` is the
    waiting message), or it is the replay of such a turn or of an operator's answer."""
    author: str = "bot"
    """Who wrote `text`: `bot`, or `operator:<id>` when replaying an operator's answer."""
    sources: list[Passage] = field(default_factory=list)
    """The passages of the business's documents the reply was given, best first (empty
    when none were; docs/knowledge.md)."""
    citations: list[Passage] = field(default_factory=list)
    """The passages the reply actually cites, first cited first: those of `sources` the
    response expert named for what it said (its citation numbers, checked against the
    passages sent; docs/knowledge.md). Empty when it cites none."""
    handler_failed: bool = False
    """The category's handler raised: `outcome` is the library's apology (nothing the
    handler decided), and the user was asked to try again or ask for a person."""
    reviewed: bool = False
    """The review expert checked this reply (`Orchestrator(review=True)`)."""
    routed_by: Literal["router", "triage"] = "triage"
    """Who routed the message: `triage` exactly when the triage expert was called for this
    turn (its answer used, or unusable and fallen back from); `router` when the fast first
    stage decided with no triage call: a confident `EmbeddingRouter`, or a rule on what
    the turn before left (an answer to the bot's question for a missing field or a
    correction of that request, "cancel", "yes, carry on", an answer to "which one?" or a
    confirmation question), or no routing at all (the app's screen stopped the message, or
    it was kept for a person). A replay reports what the first try did."""
    confirmation: str | None = None
    """The confirmation question, on the turn that asks the customer to confirm a request
    of a `Category(confirm=...)` (its handler has not run); `None` on any other turn."""
    categories: list[str] = field(default_factory=list)
    """Every category of the message in order, the first being `category` (several
    requests in one message: each handled in turn, or asked about; docs/conversations.md)."""
    clarify: list[str] = field(default_factory=list)
    """The categories the reply asks the customer to choose between (triage's `Clarify`,
    or `multi_intent="ask"`); empty on any other turn."""
    pending: str | None = None
    """The category of the request in progress that still misses fields after this turn
    (kept with the conversation until done, cancelled or `pending_ttl` passes)."""
    cancelled: bool = False
    """The customer cancelled the request in progress (or declined a confirmation):
    nothing ran."""
    language: str | None = None
    """The message's language (BCP 47: `"en"`, `"cy"`, `"hi"`), detected per turn; `None`
    when it could not be told (a short first message) or for a replay without a record."""

    @property
    def awaiting_confirmation(self) -> bool:
        """Whether the request waits for the customer's yes or no (show Yes / No buttons)."""
        return self.confirmation is not None

    @property
    def tokens(self) -> int:
        """All tokens of the turn, input and output, over every expert."""
        return sum(u.total_input_tokens + u.output_tokens for u in self.usage.values())
