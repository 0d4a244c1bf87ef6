"""What every expert shares: build a `ModelRequest` from a rendered prompt and call the model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel

from frontdesk.experts.providers.base import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    PromptRef,
)
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


@dataclass(frozen=True, kw_only=True)
class ExpertCall:
    """One expert's model, settings and rendered system prompt."""

    expert: str
    model: Model
    prompt: RenderedPrompt
    settings: ModelSettings

    def build(
        self,
        messages: Sequence[Message],
        *,
        output_type: type[BaseModel] | None,
        cache_prefix_messages: int = 0,
        metadata: Mapping[str, str] | None = None,
    ) -> ModelRequest:
        """The exact request this expert sends: its own system prompt and the thread."""
        return ModelRequest(
            expert=self.expert,
            system=self.prompt.text,
            messages=list(messages),
            output_type=output_type,
            settings=self.settings,
            prompt=PromptRef(
                name=self.prompt.name, version=self.prompt.version, sha256=self.prompt.sha256
            ),
            cache_prefix_messages=cache_prefix_messages,
            metadata=dict(metadata or {}),
        )

    async def send(
        self, request: ModelRequest, observer: CallObserver | None = None
    ) -> ModelResponse:
        """Send the request to this expert's model, inside `observer`'s window if given."""
        if observer is None:
            return await self.model.request(request)
        with observer.expert_call(request):
            response = await self.model.request(request)
            observer.parsed(response)
        return response
