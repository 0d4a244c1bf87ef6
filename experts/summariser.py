"""The summariser expert: the rolling summary that replaces a thread's older turns.

It is given the previous summary and the whole exchanges being evicted, as the real turns
they were (roles kept, so a user's text can never pose as the assistant), followed by one
request to write the updated summary. Its output is text; an empty or blank answer is an
error, so that a compaction never replaces turns with nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from frontdesk.errors import EmptySummary
from frontdesk.experts._call import CallObserver, ExpertCall
from frontdesk.experts.providers.base import Message, ModelResponse

PREVIOUS_LABEL = "Summary so far (of the turns before the ones below):"
WRITE_REQUEST = (
    "Write the updated summary now: the summary so far (if any) plus every turn above."
    " Keep names, order and reference numbers, amounts, dates, decisions and what was"
    " already tried."
)


@dataclass(frozen=True, kw_only=True)
class SummaryResult:
    """The new summary and the response behind it."""

    text: str
    response: ModelResponse


def summariser_messages(previous: str | None, evicted: Sequence[Message]) -> list[Message]:
    """What the summariser is sent: the previous summary, the evicted turns, the request."""
    messages: list[Message] = []
    if previous:
        messages.append({"role": "user", "content": f"{PREVIOUS_LABEL}\n{previous}"})
    messages.extend({"role": m["role"], "content": m["content"]} for m in evicted)
    messages.append({"role": "user", "content": WRITE_REQUEST})
    return messages


@dataclass(frozen=True, kw_only=True)
class SummariserExpert:
    """Writes rolling summaries."""

    call: ExpertCall

    async def run(
        self,
        previous: str | None,
        evicted: Sequence[Message],
        *,
        metadata: Mapping[str, str],
        observer: CallObserver | None = None,
    ) -> SummaryResult:
        """Summarise `previous` plus `evicted` into one new summary.

        Raises:
            EmptySummary: the model answered with blank text.
            ModelError: the model call failed.
        """
        request = self.call.build(
            summariser_messages(previous, evicted), output_type=None, metadata=metadata
        )
        response = await self.call.send(request, observer)
        text = str(response.output or "").strip()
        if not text:
            raise EmptySummary(
                "the summariser returned no text; the thread is left as it was",
                model=response.model,
                attempts=response.attempts,
            )
        return SummaryResult(text=text, response=response)
