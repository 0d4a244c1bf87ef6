"""The JSON bodies of the API (what `/openapi.json` describes)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class MessageIn(BaseModel):
    """A user message (or an edit's new text)."""

    model_config = ConfigDict(extra="forbid")
    # Documented, not enforced here: the library checks the text and says what is wrong
    # (InvalidUserText), and the 422 carries its message.
    text: str = Field(
        description="What the user wrote: not blank, no control characters, at most the "
        "orchestrator's max_message_chars (16,000 by default).",
        json_schema_extra={"minLength": 1},
    )


class ConversationOut(BaseModel):
    """A conversation the server made for the caller."""

    conversation_id: str = Field(description="Unguessable; only its owner can use it.")


class CitationOut(BaseModel):
    """A passage of the business's documents the reply cites."""

    id: str = Field(description="The passage's id (stable across re-adds of its source).")
    source: str = Field(
        description="Its document's name (a URL when the documents were added under theirs:"
        " the chat page links it)."
    )
    title: str = Field(description="Its section's heading.")
    version: int = Field(description="Which version of its text the reply was given.")


class ReplyOut(BaseModel):
    """An answered turn."""

    text: str = Field(description="The reply to show.")
    category: str | None = Field(description="Triage's category.")
    routed_by: Literal["router", "triage"] = Field(
        default="triage",
        description="Who routed the message: `router` (the app's embedding router was"
        " confident: no triage model call) or `triage` (the triage expert, or no routing"
        " call at all: a confirmation's answer, a screened message).",
    )
    request: dict[str, Any] | None = Field(description="The extracted request, if any.")
    need_more_info: dict[str, Any] | None = Field(
        description="What the request expert found missing, if anything."
    )
    message_id: str = Field(description="The assistant message's id (for regenerate).")
    user_message_id: str = Field(description="The user message's id (for edit).")
    handoff: bool = Field(description="Whether a person has the conversation now.")
    confirmation: str | None = Field(
        default=None,
        description="The confirmation question, when the request waits for the customer's"
        " yes or no (its handler has not run); else null.",
    )
    awaiting_confirmation: bool = Field(
        default=False, description="Whether to offer Yes / No: the reply asks to confirm."
    )
    categories: list[str] = Field(
        default_factory=list,
        description="Every category of the message in order (several requests in one"
        " message); the first is `category`.",
    )
    clarify: list[str] = Field(
        default_factory=list,
        description="The categories the reply asks the customer to choose between; else empty.",
    )
    pending: str | None = Field(
        default=None,
        description="The category of the request in progress that still misses fields.",
    )
    cancelled: bool = Field(
        default=False, description="The customer cancelled the request in progress."
    )
    language: str | None = Field(
        default=None, description="The message's language (BCP 47: en, cy, es, hi)."
    )
    citations: list[CitationOut] = Field(
        default_factory=list,
        description="The passages the reply cites, first cited first (empty: none).",
    )


class ThreadMessageOut(BaseModel):
    role: str
    content: str


class ThreadOut(BaseModel):
    """What the experts are sent next: only user and assistant turns."""

    summary: str | None = Field(default=None, description="The summary of older turns.")
    messages: list[ThreadMessageOut]


class TranscriptMessageOut(BaseModel):
    id: str
    parent_id: str | None
    role: str
    content: str
    author: str = Field(description="Who wrote it: the user, the bot, or an operator.")
    created_at: str
    failed: bool = Field(description="A failed turn's safe reply rather than a real one.")
    kind: str = Field(
        description="`message`; `failed` (a failed turn's safe reply); `handoff` (the "
        "waiting message under a user message kept for a person)."
    )


class TranscriptOut(BaseModel):
    """Every message of the active path, root first."""

    messages: list[TranscriptMessageOut]
    handoff: bool = Field(description="Whether a person has the conversation now.")


class ConversationStateOut(BaseModel):
    """A conversation's own state: did it help."""

    conversation_id: str
    created_at: str
    resolution: str = Field(
        description="`open`, `resolved`, `assumed_resolved`, `handed_off` or `abandoned`."
    )
    resolved_at: str | None = Field(description="When it was resolved (ISO 8601, UTC).")
    resolved_by: str | None = Field(
        description="`customer`, `handler`, `operator` or `timeout` (or null)."
    )


class FeedbackIn(BaseModel):
    """A customer's rating of one bot answer; a repeated rating replaces the last."""

    model_config = ConfigDict(extra="forbid")
    rating: int = Field(description="1 to 5; thumbs up is 5, thumbs down is 1.")
    comment: str | None = Field(default=None, description="Optional, at most 4,000 characters.")


class FeedbackOut(BaseModel):
    message_id: str
    rating: int
    comment: str | None
    resolved: bool = Field(description="This rating resolved the conversation.")


class ErrorOut(BaseModel):
    detail: str
    type: str


Responses = dict[int | str, dict[str, Any]]

EVERY_ROUTE = {401: "No bearer token, or one refused.", 429: "Rate limited; see Retry-After."}
"""What any `/v1` route may answer besides its own errors."""
WITH_BODY = {
    400: "A body that is not JSON.",
    408: "The body came too slowly.",
    413: "The request body is over the limit.",
}
"""What a route that reads a request body may answer too."""


def error_responses(*descriptions: dict[int, str]) -> Responses:
    """OpenAPI `responses=` for these status codes (later descriptions win), each an
    `ErrorOut` body."""
    merged: dict[int, str] = {}
    for part in descriptions:
        merged.update(part)
    return {code: {"model": ErrorOut, "description": text} for code, text in merged.items()}


class HealthOut(BaseModel):
    status: str


class ReadyOut(BaseModel):
    status: str
    database: str
    schema_revision: list[str] = Field(description="The database's revision(s).")
    head: list[str] = Field(description="The revision(s) this code needs.")


class HandoffIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, description="Why a person takes it over.")


class HandoffOut(BaseModel):
    conversation_id: str
    user_id: str | None
    reason: str
    opened_at: str
    waiting_seconds: float
    waiting_since: str | None = Field(
        default=None, description="Since when the user has waited (null: answered)."
    )
    claimed_by: str | None = Field(
        default=None, description="The operator who has claimed it, or null: anyone may."
    )
    profile: str | None = Field(
        default=None, description="The conversation's profile (null: from before profiles)."
    )


class ClaimOut(BaseModel):
    conversation_id: str
    claimed_by: str
    previous: str | None = Field(
        description="The operator it was taken from (a transfer), or null."
    )


class ContextTurnOut(BaseModel):
    user_message_id: str
    text: str
    category: str | None
    request: Any = None
    need_more_info: Any = None
    instruction: str | None


class ContextFactOut(BaseModel):
    id: str
    text: str
    key: str | None
    trust: Literal["customer", "verified"] = Field(
        description="`verified`: the business's record; `customer`: the customer's own,"
        " unverified word."
    )


class ContextOut(BaseModel):
    conversation_id: str
    user_id: str | None
    summary: str | None = Field(description="The current summary of older turns, if any.")
    memories: list[str] = Field(
        description="The texts of `facts` (kept for one release: read `facts`)."
    )
    facts: list[ContextFactOut] = Field(
        description="What the conversation's profile remembers about the customer, the most"
        " recently updated first, each with whose word it is."
    )
    turns: list[ContextTurnOut] = Field(
        description="Each user message of the active path with what its turn decided."
    )
    resolution: str = Field(
        default="open",
        description="`open`, `resolved`, `assumed_resolved`, `handed_off` or `abandoned`.",
    )
    resolved_by: str | None = Field(
        default=None, description="`customer`, `handler`, `operator` or `timeout` (or null)."
    )
    resolved_at: str | None = Field(default=None, description="When (ISO 8601, UTC).")


class HandoffsOut(BaseModel):
    handoffs: list[HandoffOut]


class OperatorMessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="The operator's answer.", json_schema_extra={"minLength": 1})


class OperatorMessageOut(BaseModel):
    message_id: str
    author: str


class HandBackIn(BaseModel):
    """How the operator hands the conversation back."""

    model_config = ConfigDict(extra="forbid")
    resolved: bool = Field(
        default=False,
        description="The customer's matter is done: the conversation is `resolved` by"
        " `operator` (else it is `open` again).",
    )


class HandBackOut(BaseModel):
    conversation_id: str
    handoff: bool
    resolution: str = Field(default="open", description="The conversation's resolution now.")
    resolved_by: str | None = None


class ErasureOut(BaseModel):
    """What was erased: `user_id`, then one count per kind of record (`ErasureReport`)."""

    model_config = ConfigDict(extra="allow")
    user_id: str


class MemoryOut(BaseModel):
    id: str
    text: str
    key: str | None
    source: str = Field(
        description="Who told it: memory_expert, handler, user, operator, or"
        " conversation_summary (a past conversation's summary)."
    )
    trust: str = Field(
        description="customer (the customer's own word, not verified) or verified (the"
        " business's record)."
    )
    conversation_id: str | None
    created_at: str
    updated_at: str


class MemoriesOut(BaseModel):
    """The current facts about the caller, the most recently updated first, and the kept
    summaries of their past conversations apart (they are not facts)."""

    memories: list[MemoryOut]
    past_conversations: list[MemoryOut] = Field(
        default_factory=list,
        description="Summaries of the caller's past conversations, newest first (each with"
        " its conversation_id); deleted like a fact.",
    )


class DeletedOut(BaseModel):
    deleted: int = Field(description="How many current facts were forgotten.")
