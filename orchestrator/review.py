"""Review: each draft reply is checked by the review expert before the customer sees it.

With `Orchestrator(review=True)`, the response expert's draft goes to the review expert
(`experts/review.py`) with the handler's instruction, the passages the writer was given and
the app's `review_rules`. A rejected draft is written again once, with the reviewer's note;
a second rejection sends the app's `review_fallback` words instead. Every verdict is
audited (`review` events). A streaming caller gets the reply only once it is approved, as
one delta: a draft that fails is never shown (the price is the first-token time, measured
in docs/safeguards.md). An approved reply (`Outcome.reply`) is not reviewed: it is the
business's own wording.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from frontdesk.errors import (
    ConfigError,
    ModelError,
    OutputValidationError,
    Refusal,
    TruncatedOutput,
    TurnFailed,
)
from frontdesk.experts.providers import Message, ModelResponse
from frontdesk.experts.providers.base import OnDelta
from frontdesk.experts.response import ResponseResult
from frontdesk.experts.review import ReviewExpert
from frontdesk.orchestrator._recorder import TurnRecorder

DEFAULT_FALLBACK = (
    "I'm sorry, I can't give you a reliable answer to that right now. Please ask for a"
    " person and a colleague will help."
)
"""What is sent when two drafts in a row fail the review (`review_fallback`)."""


@dataclass(frozen=True, kw_only=True)
class Review:
    """The review expert and what it checks drafts against."""

    expert: ReviewExpert
    rules: tuple[str, ...] = ()
    fallback: str = DEFAULT_FALLBACK

    def __post_init__(self) -> None:
        if not self.fallback.strip():
            raise ConfigError("review_fallback must be a non-empty text")
        if any(not isinstance(r, str) or not r.strip() for r in self.rules):
            raise ConfigError("review_rules must be non-empty texts")


Draft = Callable[[str | None], Awaitable[ResponseResult]]
"""Writes a draft (not streamed), given the reviewer's note on the one before, if any."""


@dataclass(frozen=True, kw_only=True)
class Reviewed:
    """The reply to send, and the review's own response (its usage summed)."""

    answer: ResponseResult
    review: ModelResponse


async def reviewed(
    review: Review,
    recorder: TurnRecorder,
    *,
    thread: Sequence[Message],
    instruction: str,
    metadata: Mapping[str, str],
    draft: Draft,
    sink: OnDelta | None,
    user_message_id: str,
) -> Reviewed:
    """The draft the reviewer approved (redrafted once with its note), or the fallback.

    Raises:
        TurnFailed: the review model is out of service (stage `review`).
    """
    answer = await draft(None)
    spent: ModelResponse | None = None
    written = answer.response.usage
    text: str | None = None
    for attempt in (1, 2):
        try:
            result = await review.expert.run(
                thread,
                answer.text,
                instruction=instruction,
                rules=review.rules,
                passages=answer.passages,
                metadata=metadata,
                observer=recorder,
            )
        except (OutputValidationError, TruncatedOutput, Refusal, ValidationError) as e:
            approved, note = False, f"the review answer was unusable ({type(e).__name__})"
        except ModelError as e:
            raise TurnFailed(str(e), user_message_id=user_message_id, stage="review") from e
        else:
            approved, note = result.verdict.approved, result.verdict.note
            spent = result.response if spent is None else _summed(spent, result.response)
        recorder.note("review", attempt=attempt, approved=approved, note=note)
        if approved:
            text = answer.text
            break
        if attempt == 1:
            answer = await draft(note or "the reviewer did not approve the draft")
            written = written + answer.response.usage
    response = dataclasses.replace(answer.response, usage=written)
    if text is None:  # Two drafts failed: the app's words instead (the `reply` event).
        text = review.fallback
    if sink is not None:
        await sink(text)
    return Reviewed(
        answer=ResponseResult(text=text, response=response, passages=answer.passages),
        review=spent or ModelResponse(output=None, model=""),
    )


def _summed(a: ModelResponse, b: ModelResponse) -> ModelResponse:
    return dataclasses.replace(b, usage=a.usage + b.usage, attempts=a.attempts + b.attempts)
