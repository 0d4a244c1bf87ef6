"""What every expert shares: build a `ModelRequest` from a rendered prompt and call the model.

Each call is one `chat {model}` span and one count of the GenAI metrics
(`frontdesk.telemetry.expert_call`), whichever expert makes it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel

from frontdesk import telemetry
from frontdesk.errors import TruncatedOutput
from frontdesk.experts.providers.base import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    OnDelta,
    PromptRef,
    Speculation,
    request_streaming,
)
from frontdesk.knowledge import Passage
from frontdesk.prompts import RenderedPrompt


class CallObserver(Protocol):
    """Sees each expert call: its exact request while it runs, then its parsed answer.

    The orchestrator's audit recorder is one; it is passed to each call explicitly.
    """

    def expert_call(self, request: ModelRequest) -> AbstractContextManager[None]:
        """A window around the model call (the attempts inside it belong to `request`)."""
        ...

    def parsed(self, response: ModelResponse) -> None:
        """The call's successful response."""
        ...

    def cut_off(self, model: str) -> None:
        """The call was cancelled mid-attempt (the turn deadline): record that attempt."""
        ...


@dataclass(frozen=True, kw_only=True)
class MemoryBlock:
    """What an expert is sent of the user's memory: the blocks' text (each delimited and
    labelled with whose word it is, `frontdesk.labels`) and the facts' ids."""

    text: str
    ids: tuple[str, ...]


def with_memory(messages: Sequence[Message], memory: MemoryBlock | None) -> list[Message]:
    """`messages` with the memory blocks at the start of the last user turn, before the
    question: user-role content, never system text, and not a turn of its own (the
    user/assistant alternation every adapter needs stays as it was). The stored thread is
    not touched: the blocks are context for this call only."""
    sent = list(messages)
    if memory is None or not memory.text:
        return sent
    for i in range(len(sent) - 1, -1, -1):
        if sent[i]["role"] == "user":
            sent[i] = {"role": "user", "content": f"{memory.text}\n\n{sent[i]['content']}"}
            return sent
    # No user turn (a thread that starts with the assistant): the blocks open it.
    return [{"role": "user", "content": memory.text}, *sent]


@dataclass(frozen=True, kw_only=True)
class ExpertCall:
    """One expert's model, settings and rendered system prompt."""

    expert: str
    model: Model
    prompt: RenderedPrompt
    settings: ModelSettings

    @functools.cached_property
    def prompt_ref(self) -> PromptRef:
        """The system prompt as the audit log names it, hashed once (not per request)."""
        return PromptRef(
            name=self.prompt.name, version=self.prompt.version, sha256=self.prompt.sha256
        )

    def build(
        self,
        messages: Sequence[Message],
        *,
        output_type: type[BaseModel] | None,
        cache_prefix_messages: int = 0,
        metadata: Mapping[str, str] | None = None,
        memory: MemoryBlock | None = None,
        passages: Sequence[Passage] = (),
        speculation: Speculation | None = None,
    ) -> ModelRequest:
        """The exact request this expert sends: its own system prompt and the thread, with
        what is remembered about the user (if anything) at the start of its last user turn
        (`with_memory`; `passages`: those its last user turn carries, for the audit log;
        `speculation`: a call whose answer may be thrown away)."""
        return ModelRequest(
            expert=self.expert,
            system=self.prompt.text,
            messages=with_memory(messages, memory),
            output_type=output_type,
            settings=self.settings,
            prompt=self.prompt_ref,
            cache_prefix_messages=cache_prefix_messages,
            metadata=dict(metadata or {}),
            memory=memory.text if memory is not None else "",
            memory_ids=memory.ids if memory is not None else (),
            passages=tuple(passages),
            speculation=speculation,
        )

    async def send(
        self,
        request: ModelRequest,
        observer: CallObserver | None = None,
        *,
        on_delta: OnDelta | None = None,
    ) -> ModelResponse:
        """Send the request to this expert's model, inside `observer`'s window if given.

        With `on_delta` the answer's text is streamed to it as it arrives (a model that
        cannot stream hands its whole text over as one piece).
        """
        with telemetry.expert_call(self.expert, self.model.name) as span:
            if observer is None:
                response = await self._answer(request, on_delta)
            else:
                with observer.expert_call(request):
                    try:
                        response = await self._answer(request, on_delta)
                    except asyncio.CancelledError:
                        observer.cut_off(self.model.name)
                        raise
                    observer.parsed(response)
            usage = response.usage
            span.answered(
                model=response.model,
                stop_reason=response.stop_reason,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                attempts=response.attempts,
            )
            span.content(request.system, request.messages, response.output)
        return response

    async def _answer(self, request: ModelRequest, on_delta: OnDelta | None) -> ModelResponse:
        """The model's answer, bounded: one over `max_tokens` x `CHARS_PER_TOKEN` characters
        (an endpoint that ignores `max_tokens`: a self-hosted server, a proxy) is asked for
        once more, then refused as `TruncatedOutput` (a streamed one at once: its text was
        shown); it is never parsed into a request or stored as a reply."""
        bound = request.settings.max_tokens * CHARS_PER_TOKEN
        for attempt in (1, 2):
            if on_delta is None:
                response = await self.model.request(request)
            else:
                response = await request_streaming(self.model, request, on_delta)
            size = _size(response.output)
            if size <= bound:
                return response
            if on_delta is not None or attempt == 2:
                raise TruncatedOutput(
                    f"{response.model or self.model.name}: the {self.expert} expert's answer"
                    f" is {size} characters, over {bound} (max_tokens"
                    f" {request.settings.max_tokens} x {CHARS_PER_TOKEN}): the endpoint did not"
                    " keep to max_tokens; the answer is refused, never stored",
                    model=response.model or self.model.name,
                    attempts=response.attempts,
                )
        raise AssertionError("unreachable")


CHARS_PER_TOKEN = 8
"""The most characters an answer may have per token of `max_tokens` (a token is 3-4
characters of English; 8 leaves room for long words, other scripts and JSON)."""


def _size(output: object) -> int:
    """How many characters an answer has (a structured one as its JSON)."""
    if isinstance(output, str):
        return len(output)
    if isinstance(output, BaseModel):
        return len(output.model_dump_json())
    return len(str(output))
