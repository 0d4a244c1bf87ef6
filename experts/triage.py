"""The triage expert: which category does the user's latest message belong to?

Its output type is generated from the registry, so a category the model invents fails
validation by construction; the two built-ins (`OTHER`, `HUMAN`) are always present.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator
from pydantic.config import JsonDict

from frontdesk.experts._call import CallObserver, ExpertCall, MemoryBlock
from frontdesk.experts.category import HUMAN, OTHER, Category
from frontdesk.experts.providers.base import Message, ModelResponse
from frontdesk.prompts import RenderedPrompt

BUILTIN_DESCRIPTIONS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    OTHER: (
        "Small talk, thanks, or anything outside what the categories above cover.",
        ("Hello!", "Thanks, that's helpful", "What's the weather like?"),
    ),
    HUMAN: (
        "The customer asks for a person, or is distressed or angry.",
        ("Can I talk to a human?", "I'm furious, get me someone who can help"),
    ),
}


MAX_CATEGORIES = 3
"""The most requests triage reads in one message (`categories`)."""


@dataclass(frozen=True)
class Clarify:
    """Triage's answer when two (or more) categories fit the message and the thread cannot
    decide: the reply asks the customer to choose (`Reply.clarify`), and their answer is
    routed without another triage call. A scripted triage may return one as its output."""

    candidates: Sequence[str]
    """The categories that fit, most likely first."""
    reason: str = ""


class TriageDecision(BaseModel):
    """Base of the generated triage output types."""

    model_config = ConfigDict(frozen=True)

    category_names: ClassVar[tuple[str, ...]] = ()
    category: Any
    reason: str = ""
    categories: list[Any] = []
    clarify: list[Any] = []
    language: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _first_is_category(cls, data: Any) -> Any:
        """`category` may be left out when `categories` (or `clarify`) names it first."""
        if isinstance(data, Clarify):
            data = {"clarify": list(data.candidates), "reason": data.reason}
        if isinstance(data, dict) and data.get("category") is None:
            listed = data.get("categories") or data.get("clarify")
            if isinstance(listed, list) and listed:
                data = {**data, "category": listed[0]}
        return data

    @property
    def name(self) -> str:
        """The chosen category's name."""
        return _name(self.category)

    @property
    def names(self) -> tuple[str, ...]:
        """Every category of the message in order, the first being `name` (at most
        `MAX_CATEGORIES`, no repeats)."""
        listed = [self.name, *(_name(c) for c in self.categories)]
        return tuple(dict.fromkeys(listed))[:MAX_CATEGORIES]

    @property
    def candidates(self) -> tuple[str, ...]:
        """The categories to ask the customer to choose between (two or more), or `()`."""
        listed = tuple(dict.fromkeys(_name(c) for c in self.clarify))
        return listed if len(listed) >= 2 else ()


def _name(value: Any) -> str:
    return str(value.value if isinstance(value, enum.Enum) else value)


def triage_output_type(categories: Sequence[Category]) -> type[TriageDecision]:
    """Build the triage output type: an enum of every registered name plus the built-ins."""
    described = {c.name: (c.description, tuple(c.examples)) for c in categories}
    described.update(BUILTIN_DESCRIPTIONS)
    return output_type_of(tuple((name, *each) for name, each in described.items()))


Described = tuple[tuple[str, str, tuple[str, ...]], ...]
"""Categories as a triage prompt shows them: (name, description, examples), in order."""


@lru_cache(maxsize=256)
def output_type_of(described: Described) -> type[TriageDecision]:
    """The triage output type of exactly these categories (built once per selection: a
    router's candidates recur)."""
    names = tuple(name for name, _, _ in described)
    category_enum = enum.Enum(  # type: ignore[misc]
        "CategoryName", {name: name for name in names}, type=str
    )
    extra: JsonDict = {
        "x-frontdesk-categories": {
            name: {"description": desc, "examples": list(examples)}
            for name, desc, examples in described
        }
    }
    model = create_model(
        "TriageDecision",
        __base__=TriageDecision,
        category=(category_enum, Field(description="The category of the latest user message.")),
        reason=(str, Field(default="", description="One short sentence: why this category.")),
        categories=(
            list[category_enum],
            Field(
                default_factory=list,
                max_length=MAX_CATEGORIES,
                description="Only when the latest message makes several requests: every"
                " category it asks for, in the order asked (the first is `category`).",
            ),
        ),
        clarify=(
            list[category_enum],
            Field(
                default_factory=list,
                max_length=MAX_CATEGORIES,
                description="Only when two categories fit equally and the conversation"
                " cannot decide: both, to ask the customer which they mean.",
            ),
        ),
        language=(
            str | None,
            Field(
                default=None,
                description="The language of the latest message as a BCP 47 tag (en, cy, es, hi).",
            ),
        ),
    )
    model.model_config["json_schema_extra"] = extra
    model.model_rebuild(force=True)
    model.category_names = names
    return model


def prompt_variables(categories: Sequence[Category]) -> dict[str, Any]:
    """The triage prompt's variables: every category with description and examples."""
    listed = [
        {"name": c.name, "description": c.description, "examples": list(c.examples)}
        for c in categories
    ]
    listed += [
        {"name": name, "description": desc, "examples": list(examples)}
        for name, (desc, examples) in BUILTIN_DESCRIPTIONS.items()
    ]
    return {"categories": listed}


class Shortlist(Protocol):
    """Builds one message's triage prompt from a selection (`triage_fit.TriageShortlist`)."""

    whole_fits: bool
    """Every category's examples fit the allowance: the whole prompt is sent."""

    def for_message(self, text: str) -> tuple[RenderedPrompt, Described] | None:
        """Every category, with the examples nearest `text` (`None`: all fit)."""
        ...

    def for_candidates(self, names: Sequence[str], text: str) -> tuple[RenderedPrompt, Described]:
        """Only the categories `names`."""
        ...

    def output_type(self, shown: Described) -> type[TriageDecision]:
        """The output type of the categories `shown`."""
        ...


@dataclass(frozen=True, kw_only=True)
class TriageResult:
    """The triage expert's decision and the response that carried it."""

    category: str
    reason: str
    response: ModelResponse
    categories: tuple[str, ...] = ()
    """Every category of the message in order (the first is `category`)."""
    clarify: tuple[str, ...] = ()
    """The categories to ask the customer to choose between (`Clarify`), or `()`."""
    language: str | None = None
    """The message's language as triage read it (BCP 47), or `None`."""


@dataclass(frozen=True, kw_only=True)
class TriageExpert:
    """Routes the latest user message to one category."""

    call: ExpertCall
    output_type: type[TriageDecision]
    shortlist: Shortlist | None = None
    """Builds one message's prompt when the categories' examples do not all fit, or from
    a router's candidates (`triage_fit.py`); `None`: the prompt is always sent whole."""

    def for_message(self, text: str, candidates: Sequence[str] = ()) -> TriageExpert:
        """This expert with the prompt and output type for the message `text`: only
        `candidates` (a router's) when given; else every category, with the examples
        nearest `text` when they do not all fit; itself when they do (known since the
        shortlist was built: no work per message)."""
        if self.shortlist is None or (not candidates and self.shortlist.whole_fits):
            return self
        if candidates:
            picked = self.shortlist.for_candidates(candidates, text)
        else:
            found = self.shortlist.for_message(text)
            if found is None:
                return self
            picked = found
        rendered, shown = picked
        return dataclasses.replace(
            self,
            call=dataclasses.replace(self.call, prompt=rendered),
            output_type=self.shortlist.output_type(shown),
        )

    async def run(
        self,
        messages: Sequence[Message],
        *,
        metadata: Mapping[str, str],
        cache_prefix: int = 0,
        observer: CallObserver | None = None,
        memory: MemoryBlock | None = None,
    ) -> TriageResult:
        """Classify the latest user message of `messages`."""
        request = self.call.build(
            messages,
            output_type=self.output_type,
            cache_prefix_messages=cache_prefix,
            metadata=metadata,
            memory=memory,
        )
        response = await self.call.send(request, observer)
        decision = self.output_type.model_validate(response.output)
        return TriageResult(
            category=decision.name,
            reason=decision.reason,
            response=response,
            categories=decision.names,
            clarify=decision.candidates,
            language=decision.language,
        )
