"""The response expert: the reply to the latest user message, from the handler's instruction.

It reads the same user thread as every expert plus ONE trailing assistant message holding
the instruction; that message exists only in this request (and the audit log), never in
the thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from frontdesk.experts._call import CallObserver, ExpertCall
from frontdesk.experts.providers.base import Message, ModelResponse


@dataclass(frozen=True, kw_only=True)
class ResponseResult:
    """The reply text and the response behind it."""

    text: str
    response: ModelResponse


@dataclass(frozen=True, kw_only=True)
class ResponseExpert:
    """Writes the reply."""

    call: ExpertCall

    async def run(
        self,
        messages: Sequence[Message],
        instruction: str,
        *,
        metadata: Mapping[str, str],
        cache_prefix: int = 0,
        observer: CallObserver | None = None,
    ) -> ResponseResult:
        """Answer the last user message of `messages`, following `instruction`."""
        with_instruction: list[Message] = [
            *messages,
            {"role": "assistant", "content": instruction},
        ]
        request = self.call.build(
            with_instruction,
            output_type=None,
            cache_prefix_messages=cache_prefix,
            metadata=metadata,
        )
        response = await self.call.send(request, observer)
        text = str(response.output).strip()
        return ResponseResult(text=text, response=response)
