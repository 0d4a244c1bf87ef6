"""Approved replies: a handler's `Outcome.reply`, sent to the customer word for word.

Wording a compliance team signed off (a disclosure, a fee, a legal notice) must not be
rewritten by a model: the response expert is not called, the text is streamed as one delta
and the audit records it as approved (`reply_approved`).
"""

from __future__ import annotations

from frontdesk.experts.providers import ModelResponse
from frontdesk.experts.providers.base import OnDelta
from frontdesk.experts.response import ResponseResult
from frontdesk.orchestrator._recorder import TurnRecorder

MODEL = "approved"
"""`Reply.models["response"]` (and the stored reply's model) of an approved reply: no
model wrote it."""


async def reply(recorder: TurnRecorder, text: str, sink: OnDelta | None) -> ResponseResult:
    """The approved `text` as the turn's response, streamed as one delta to `sink`."""
    recorder.note("reply_approved", text=text)
    if sink is not None:
        await sink(text)
    return ResponseResult(text=text, response=ModelResponse(output=text, model=MODEL))
