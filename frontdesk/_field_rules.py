"""Per-field redaction rules: the `Redact` annotation, reading a request model's rules, and
keeping them out of the schema the models are sent (`frontdesk.redaction` re-exports it)."""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from frontdesk.errors import ConfigError

__all__ = [
    "RULES",
    "SPELLINGS",
    "STYLES",
    "Redact",
    "Rule",
    "Style",
    "field_rules",
    "rule_named",
    "schema_without_rules",
    "style_named",
]

Rule = Literal["keep", "mask", "pseudonymise", "drop"]
"""What a view shows of a request field: as is, its last 4 characters, a token, nothing."""
Style = Literal["label", "mask", "pseudonymise"]
"""How a detected value is replaced: `[CARD]`, `**** **** **** 1111`, `[pseudonym:3f9a…]`."""
RULES: tuple[Rule, ...] = ("keep", "mask", "pseudonymise", "drop")
STYLES: tuple[Style, ...] = ("label", "mask", "pseudonymise")
SPELLINGS = {"pseudonymize": "pseudonymise", "pseudonym": "pseudonymise"}
"""Other spellings accepted for `pseudonymise`."""


def rule_named(value: object, where: str) -> Rule:
    """`value` as a `Rule`, or a `ConfigError` that names `where` it was found."""
    name = SPELLINGS.get(str(value), str(value))
    if name not in RULES:
        raise ConfigError(f"{where}: unknown redaction rule {value!r}; use one of {RULES}")
    return name


def style_named(value: object, where: str) -> Style:
    """`value` as a `Style`, or a `ConfigError` that names `where` it was found."""
    name = SPELLINGS.get(str(value), str(value))
    if name not in STYLES:
        raise ConfigError(f"{where}: unknown replacement style {value!r}; use one of {STYLES}")
    return name


@dataclass(frozen=True)
class Redact:
    """A request field's redaction rule, as `Annotated` metadata.

    ```python
    class Payment(BaseModel):
        card_number: Annotated[str, Redact("mask")]
        name: Annotated[str, Redact("pseudonymise")]
    ```

    The annotation is not part of the field's JSON schema, so the models are sent the
    same schema as without it.
    """

    rule: Rule

    def __post_init__(self) -> None:
        object.__setattr__(self, "rule", rule_named(self.rule, "Redact(...)"))


# -- per-field rules on request models ------------------------------------------------------


def _models_in(annotation: Any) -> Iterable[type[BaseModel]]:
    """The pydantic models inside a field's type (`Card`, `Card | None`, `list[Card]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    origin = get_origin(annotation)
    if origin is typing.Annotated:
        yield from _models_in(get_args(annotation)[0])
    elif origin is not None or isinstance(annotation, types.UnionType):
        for arg in get_args(annotation):
            yield from _models_in(arg)


@functools.cache
def field_rules(model: type[BaseModel]) -> Mapping[str, Rule]:
    """The redaction rules a request model declares, by dotted field path.

    Nested models give `card.number`; a list of models is looked through (`items.sku`).

    Raises:
        ConfigError: a rule name that is not one of `keep`, `mask`, `pseudonymise`, `drop`.
    """
    rules: dict[str, Rule] = {}
    for name, info in model.model_fields.items():
        where = f"{model.__name__}.{name}"
        declared = [m.rule for m in info.metadata if isinstance(m, Redact)]
        extra = info.json_schema_extra
        if isinstance(extra, Mapping) and "redact" in extra:
            declared.append(rule_named(extra["redact"], where))
        if declared:
            rules[name] = declared[-1]
            continue
        for inner in _models_in(info.annotation):
            if inner is not model:
                rules.update({f"{name}.{k}": v for k, v in field_rules(inner).items()})
    return types.MappingProxyType(rules)


def schema_without_rules(schema: Any) -> Any:
    """A JSON schema without the `redact` keys `json_schema_extra={"redact": ...}` put in it,
    so the models are sent the same schema with a rule as without (fields *named* `redact`
    stay)."""
    if isinstance(schema, list):
        return [schema_without_rules(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "redact" and SPELLINGS.get(str(value), value) in RULES:
            continue
        if key in ("default", "examples", "const", "enum"):  # Values, not schemas.
            out[key] = value
        elif key in ("properties", "$defs", "definitions", "patternProperties"):
            out[key] = (
                {k: schema_without_rules(v) for k, v in value.items()}
                if isinstance(value, dict)
                else value
            )
        elif isinstance(value, dict | list):
            out[key] = schema_without_rules(value)
        else:
            out[key] = value
    return out
