"""The memory expert: which stable facts about the customer one user message states.

It runs after the reply, off the reply path (`orchestrator/memory.py`), and is sent only
the user's own turn (never assistant text), with what is already remembered about them in
the memory block, so that it can reuse a key when a fact changes ("moved to Mumbai"
replaces "lives in Pune"). Its answer is structured: a list of facts, each with an optional
key; facts with the same key supersede one another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, Field

from frontdesk.experts._call import CallObserver, ExpertCall, MemoryBlock
from frontdesk.experts.providers.base import Message, ModelResponse
from frontdesk.labels import neutralise
from frontdesk.memory import MAX_FACT_CHARS

MAX_FACTS = 8
"""Facts kept from one message at most (the rest of a long list is dropped)."""


class Fact(BaseModel):
    """One stable fact about the customer."""

    text: str = Field(
        description="The fact in a few words, about the customer, e.g. 'Prefers replies in"
        " Hindi', 'Allergic to peanuts', 'Lives in Pune'."
    )
    key: str | None = Field(
        description="A short snake_case topic when a newer fact on it replaces the old one"
        " (home_city, language, diet, name); null for facts that add up (one allergy of"
        " several)."
    )


class RememberedFacts(BaseModel):
    """The stable facts and preferences the message states (often none)."""

    facts: list[Fact] = Field(
        description="Stable facts and preferences worth remembering for later conversations;"
        " an empty list when the message states none (most messages)."
    )


@dataclass(frozen=True, kw_only=True)
class MemoryResult:
    """The facts found and the response behind them."""

    facts: list[Fact]
    response: ModelResponse


@dataclass(frozen=True, kw_only=True)
class MemoryExpert:
    """Finds the facts worth remembering in a user's message."""

    call: ExpertCall

    async def run(
        self,
        user_text: str,
        *,
        known: MemoryBlock | None,
        metadata: Mapping[str, str],
        observer: CallObserver | None = None,
    ) -> MemoryResult:
        """The facts `user_text` states (blank and over-long ones dropped, at most
        `MAX_FACTS`).

        Raises:
            OutputValidationError: the answer did not fit `RememberedFacts`.
            ModelError: the model call failed.
        """
        # The customer's words, with any label of ours in them marked (they follow the
        # genuine blocks of what is known in the same user turn).
        messages: list[Message] = [{"role": "user", "content": neutralise(user_text)}]
        request = self.call.build(
            messages, output_type=RememberedFacts, metadata=metadata, memory=known
        )
        response = await self.call.send(request, observer)
        found = RememberedFacts.model_validate(response.output)
        # A blank or over-long "fact" is not one: it is dropped, the others kept.
        facts = [f for f in found.facts if 0 < len(f.text.strip()) <= MAX_FACT_CHARS]
        facts = facts[:MAX_FACTS]
        return MemoryResult(facts=facts, response=response)
