"""The events the audit log records: one row each, hash-chained per conversation.

The orchestrator builds these during a turn and appends them in one batch after the reply;
`audit` never imports `experts` or `orchestrator`, so the payloads are plain JSON-able data.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from frontdesk.frozen import quick_init

EventKind = Literal[
    "turn_started",  # payload: user_message_id, client_message_id, text, user_id, and
    # optionally parent_id (the message the user message answers), which lets
    # `audit show` pick the active path when edits and regenerations made branches
    "model_attempt",  # payload: see ModelAttemptPayload below
    "triage",  # payload: category, reason
    "routed",  # payload: by (router | triage), category (the router's, or null), embedder,
    # threshold, margin, scores {category: cosine} (the router's candidates, best first),
    # error (the embedder failed: triage ran on every category); `EmbeddingRouter`
    "request",  # payload: category, request (dict) or need_more_info (dict)
    "outcome",  # payload: category, instruction, data
    "outcome_reused",  # payload: category, handler_ran (a retry reuses the stored outcome)
    "speculation",  # payload: expert, category (guessed), triage_category, kept, usage (the
    # speculative call's tokens; its attempt rows precede the note)
    "request_failed",  # payload: category, error (an unusable extraction; the turn hands off)
    "handler_error",  # payload: category, error
    "unreadable",  # payload: category (or null: triage), error, asked_before (the unreadable
    # turns just before; `on_unreadable="ask"` asks again, a hand-off after three)
    "response_fallback",  # payload: error (the response expert failed after the handler
    # acted: the reply was built from the outcome, `fallbacks.plain_reply`)
    "reply",  # payload: assistant_message_id, text, model, prompt versions
    "turn_failed",  # payload: error, stage
    "compaction",  # payload: summary_id, covered_until_message_id, evicted, summary text
    "compaction_failed",  # payload: error
    # Hand-off to a person. `turn_id` is the turn of the message they follow:
    # a user message's own id, an assistant message's question when it answers one, else
    # the assistant message's own id (an operator reply after another assistant message).
    "hand_off",  # payload: handoff_id, reason, leaf_turn_id
    "handoff_held",  # payload: handoff_id, assistant_message_id (the waiting marker), text;
    # after the `turn_started` of a user message kept for a person (no model call)
    "operator_reply",  # payload: handoff_id, operator_id, assistant_message_id, parent_id,
    # superseded (the waiting marker it replaced, or null), text
    "handoff_timeout",  # payload: handoff_id, assistant_message_id, parent_id, superseded,
    # text (the timeout message, written by the bot as it takes the conversation back)
    "handoff_claimed",  # payload: handoff_id, operator_id, previous (the operator it was
    # taken from: a transfer), transfer (bool); a reply on an unclaimed hand-off claims it
    "hand_back",  # payload: handoff_id, by ("operator" | "timeout"), operator_id (who, or null)
    "erased",  # chain user_chain_id(user): at, requested_by, counts (no content, in clear)
    "retention",  # chain "retention": at, older_than_days, cutoff, periods_before, counts
    "memory_written",  # payload: memory ids written and superseded, keys, source (no text)
    "memory_failed",  # payload: error (the memory expert's answer was unusable or failed)
    "memory_refused",  # payload: refused [{reason, why, key}] (the memory policy; no text)
    "memory_corrected",  # payload: memory_id, by (no text)
    "memory_forgotten",  # payload: memory_ids, by, all (no text); in the user's chain
    "revealed",  # payload: view (audit show, export, replay), by (the OS user); in clear,
    # no content: who was shown a conversation's personal data without redaction
    # Did it help (docs/outcomes.md). `turn_id` is the rated answer's question.
    "feedback",  # payload: message_id, rating (1-5), comment (or null), resolved (bool)
    "resolution",  # payload: resolution, by (a hand-back's, a sweep's), previous
    "resolution_refused",  # payload: by (customer), judged_by (response), why: the reply
    # ended with the closing tag, which was also in what the expert was sent (the customer's
    # words): not a closing, the conversation stays as it is
    "operator_read",  # payload: by (operator id), conversation_id, what (no content); in the
    # user's chain: who read the customer's context, transcript or memories, and when
    # Before the bot acts or speaks (docs/safeguards.md).
    "confirmation",  # payload: status (asked | confirmed | declined | expired | corrected),
    # category, question (asked) or asked_in (the user message id of the turn that asked)
    "reply_approved",  # payload: text (an `Outcome.reply`, sent verbatim: no response expert)
    "review",  # payload: attempt (1 or 2), approved, note (the review expert's verdict)
    "screen",  # payload: action (allow | refuse | handoff), reason, mode (enforce | shadow)
    "spend_limit",  # payload: tokens, cost_usd, per, retry_after (the turn called no model)
    # Conversations as people have them (issue 44, docs/conversations.md). The turn's
    # `outcome` event carries `flow` {how, language, language_by, reply_in, categories,
    # clarify, cancelled, pending}: how it was routed and in which language it is answered.
    "pending",  # payload: status (started | kept | continued | offered | resumed | completed
    # | cancelled | expired | digression | replaced | dropped), category, missing, fields
    # (names only: the values are in the `request` events, with their rules)
    "clarify",  # payload: status (asked | answered | unmatched), candidates or category
    "multi_intent",  # payload: mode (sequential | ask), categories; or status stopped,
    # not_handled (the categories after a step that needs more information); or status
    # resumed, categories (a retry of a turn that failed between two handlers: those left)
]

# A `model_attempt` payload holds: expert, model, attempt, settings, prompt {name, version,
# sha256}, messages (exactly as sent), request_body (wire), response_body (raw), output
# (parsed, JSON-able), usage {input_tokens, output_tokens, cache_read_tokens,
# cache_write_tokens}, cost_usd, latency_ms, status_code, provider_request_id, stop_reason,
# error, and for a speculative request call speculation: kept | discarded
# (a replay skips a discarded answer), and when memory was sent, memory {ids} (the blocks'
# text is in `messages`, at the start of the last user turn), and when passages of the business's
# documents were sent, documents [{id, source, title, version, sha256}] (their
# text is in `messages`, in the last user turn). The system prompt text travels in
# `AuditEvent.system_prompt` and is stored once by hash.


_IDS_AT_ONCE = 64
_ids: list[str] = []
"""Event ids made ahead, taken one at a time (`list.pop` is atomic: no lock needed)."""
os.register_at_fork(after_in_child=_ids.clear)  # A child must not reuse its parent's ids.


def random_uuid4_hex() -> str:
    """`uuid.uuid4().hex` without the `UUID` object: 16 random bytes (`os.urandom`) with the
    version 4 and variant bits. A turn makes a dozen events, so the bytes of 64 ids are read
    in one call and kept in this process's memory until used (never shown before)."""
    while True:
        try:
            return _ids.pop()
        except IndexError:
            _ids.extend(_fresh_ids(_IDS_AT_ONCE))


def _fresh_ids(count: int) -> list[str]:
    data = bytearray(os.urandom(16 * count))
    data[6::16] = bytes((b & 0x0F) | 0x40 for b in data[6::16])
    data[8::16] = bytes((b & 0x3F) | 0x80 for b in data[8::16])
    text = data.hex()
    return [text[i : i + 32] for i in range(0, 32 * count, 32)]


@quick_init
@dataclass(frozen=True, kw_only=True)
class AuditEvent:
    """One audit row before it is chained and stored."""

    kind: EventKind
    turn_id: str
    """Groups the events of one turn (the user message id of the turn)."""
    payload: dict[str, Any]
    system_prompt: str | None = None
    """For `model_attempt`: the full system text; stored once, keyed by its sha256."""
    created_at: datetime = field(default_factory=functools.partial(datetime.now, UTC))
    event_id: str = field(default_factory=random_uuid4_hex)
    """Unique per event, so a batch re-sent from the spool is never stored twice."""
