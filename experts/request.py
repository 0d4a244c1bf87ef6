"""The request expert: the category's structured request, extracted from the whole thread.

Its output type wraps the category's pydantic model with `NeedMoreInfo`, so that a thread
that does not yet name every required field yields a question instead of a guess.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from frontdesk.experts._call import CallObserver, ExpertCall, MemoryBlock
from frontdesk.experts.category import Category, NeedMoreInfo
from frontdesk.experts.providers.base import Message, ModelResponse, Speculation
from frontdesk.knowledge import Passage


class Extraction(BaseModel):
    """Base of the generated request-expert output types: exactly one field is set.

    It is sent to a model as a tagged union (`wire_json_schema`): `{"kind": "request",
    "request": {...}}` or `{"kind": "need_more_info", "need_more_info": {...}}`, so a
    server's grammar enforces the choice; the answer is still validated here (patterns,
    enums, and the one-of rule for an answer without `kind`).
    """

    model_config = ConfigDict(frozen=True)

    request_model: ClassVar[type[BaseModel]]
    kind: Literal["request", "need_more_info"] | None = Field(
        default=None, description="Which of the two answers this is."
    )
    request: Any = None
    need_more_info: NeedMoreInfo | None = None
    from_memory: list[str] = Field(
        default_factory=list,
        description="The names of the request fields filled from a remembered fact about the"
        " customer (the remembered block) rather than from this conversation; empty when none.",
    )
    known: dict[str, Any] = Field(
        default_factory=dict,
        description="With need_more_info: the request's fields the customer has already"
        " given, by field name (what is known so far); empty when none.",
    )

    @model_validator(mode="before")
    @classmethod
    def _by_kind(cls, data: Any) -> Any:
        """With `kind` given, only the field it names counts (a stray other one is dropped)."""
        if isinstance(data, dict) and data.get("kind") in ("request", "need_more_info"):
            other = "need_more_info" if data["kind"] == "request" else "request"
            return {k: v for k, v in data.items() if k != other}
        return data

    @classmethod
    def wire_json_schema(cls) -> dict[str, Any]:
        """The tagged union sent to a model (see the class docstring)."""
        schema = cls.model_json_schema()
        props = schema.get("properties", {})
        request = props.get("request", {})
        branches = [b for b in request.get("anyOf", [request]) if b.get("type") != "null"]
        request_schema = dict(branches[0]) if len(branches) == 1 else {"anyOf": branches}
        if "description" in request:
            request_schema.setdefault("description", request["description"])
        need = props.get("need_more_info", {})
        need_schema = next((b for b in need.get("anyOf", [need]) if b.get("type") != "null"), need)
        union: dict[str, Any] = {
            "title": schema.get("title", cls.__name__),
            "type": "object",
            "anyOf": [
                {
                    "type": "object",
                    "properties": {
                        "kind": {"type": "string", "enum": ["request"]},
                        "request": request_schema,
                        "from_memory": props.get("from_memory", {"type": "array"}),
                    },
                    "required": ["kind", "request"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {
                        "kind": {"type": "string", "enum": ["need_more_info"]},
                        "need_more_info": need_schema,
                        "known": props.get("known", {"type": "object"}),
                    },
                    "required": ["kind", "need_more_info"],
                    "additionalProperties": False,
                },
            ],
        }
        if "$defs" in schema:
            union["$defs"] = schema["$defs"]
        return union

    @model_validator(mode="after")
    def _exactly_one(self) -> Extraction:
        if (self.request is None) == (self.need_more_info is None):
            raise ValueError(
                "set exactly one of `request` (every required field known) or"
                " `need_more_info` (what is missing, and a question)"
            )
        return self


@cache
def extraction_type(request_model: type[BaseModel]) -> type[Extraction]:
    """Build `<Request>Extraction`: the request model, or what is missing."""
    model = create_model(
        f"{request_model.__name__}Extraction",
        __base__=Extraction,
        request=(
            # A runtime-built union: its type is only known here, so it is typed as Any.
            cast(Any, request_model | None),
            Field(default=None, description="The request, when every required field is known."),
        ),
        need_more_info=(
            NeedMoreInfo | None,
            Field(default=None, description="What is missing and one question asking for it."),
        ),
    )
    model.request_model = request_model
    return model


def describe_fields(request_model: type[BaseModel]) -> str:
    """A readable list of the request model's fields for the request prompt."""
    schema = request_model.model_json_schema()
    required = set(schema.get("required", []))
    lines = []
    for name, prop in schema.get("properties", {}).items():
        kind = _kind(prop, schema.get("$defs", {}))
        need = "required" if name in required else "optional"
        text = f"- {name} ({kind}, {need})"
        if prop.get("description"):
            text += f": {prop['description']}"
        lines.append(text)
    return "\n".join(lines)


def _kind(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    if "$ref" in prop:
        prop = defs.get(str(prop["$ref"]).rsplit("/", 1)[-1], {})
    if "enum" in prop:
        return "one of " + ", ".join(json.dumps(v) for v in prop["enum"])
    if "const" in prop:
        return f"exactly {json.dumps(prop['const'])}"
    kind = str(prop.get("type", "value"))
    bounds = [
        f"{k} {prop[k]}" for k in ("minimum", "maximum", "minLength", "maxLength") if k in prop
    ]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def prompt_variables(category: Category) -> dict[str, Any]:
    """The request prompt's variables for one category."""
    assert category.request is not None
    return {
        "category": category.name,
        "description": category.description,
        "fields": describe_fields(category.request),
    }


@dataclass(frozen=True, kw_only=True)
class RequestResult:
    """The extracted request (validated) or what is missing, with the response behind it."""

    request: BaseModel | None
    need_more_info: NeedMoreInfo | None
    response: ModelResponse
    from_memory: tuple[str, ...] = ()
    """The request's fields the expert says it filled from a remembered fact (only names
    of fields the request has, and only when a request was extracted)."""
    known: Mapping[str, Any] = field(default_factory=dict)
    """With `need_more_info`: the fields the customer has given so far (only names of
    fields the request has), kept with the request in progress."""


@dataclass(frozen=True, kw_only=True)
class RequestExpert:
    """Extracts one category's request from the thread."""

    category: Category
    call: ExpertCall

    async def run(
        self,
        messages: Sequence[Message],
        *,
        metadata: Mapping[str, str],
        cache_prefix: int = 0,
        observer: CallObserver | None = None,
        memory: MemoryBlock | None = None,
        passages: Sequence[Passage] = (),
        speculation: Speculation | None = None,
    ) -> RequestResult:
        """Extract the current request from `messages` (the whole user thread);
        `speculation` marks a call started beside triage, whose answer may be discarded."""
        assert self.category.request is not None
        output_type = extraction_type(self.category.request)
        request = self.call.build(
            messages,
            output_type=output_type,
            cache_prefix_messages=cache_prefix,
            metadata=metadata,
            memory=memory,
            passages=passages,
            speculation=speculation,
        )
        response = await self.call.send(request, observer)
        extraction = output_type.model_validate(response.output)
        extracted = extraction.request
        if extracted is not None and not isinstance(extracted, self.category.request):
            extracted = self.category.request.model_validate(extracted)
        fields = self.category.request.model_fields
        from_memory = tuple(
            dict.fromkeys(
                f for f in extraction.from_memory if extracted is not None and f in fields
            )
        )
        known = {} if extracted is not None else extraction.known
        return RequestResult(
            request=extracted,
            need_more_info=extraction.need_more_info,
            response=response,
            from_memory=from_memory,
            known={k: v for k, v in known.items() if k in fields and v is not None},
        )
