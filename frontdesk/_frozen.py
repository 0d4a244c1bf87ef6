"""`quick_init`: a frozen dataclass's `__init__` without one `object.__setattr__` per field.

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__` (its
own `__setattr__` refuses): some 800 instructions a field, and a turn sets about 300 fields
of its frozen records (requests, responses, attempts, routes, decisions, the reply).
`quick_init` gives a keyword-only frozen dataclass an `__init__` that fills the instance's
`__dict__` at once: the same fields in the same order, the same defaults and factories,
a `TypeError` for a missing or unknown argument, the same signature; the instances stay
frozen (their `__setattr__` still refuses).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["quick_init"]

C = TypeVar("C", bound=type)


def quick_init(cls: C) -> C:
    """Give `cls`, a keyword-only frozen dataclass (no slots, no `__post_init__`, every
    field in `__init__`), the quick `__init__` (see the module docstring).

    Raises:
        TypeError: `cls` is not such a dataclass (its own `__init__` is kept nowhere else).
    """
    fields = dataclasses.fields(cls)
    params = getattr(cls, "__dataclass_params__", None)
    if (
        params is None
        or not params.frozen
        or "__slots__" in cls.__dict__
        or hasattr(cls, "__post_init__")
        or set(getattr(cls, "__dataclass_fields__", {})) != {f.name for f in fields}
        or any(not f.init or not f.kw_only for f in fields)
    ):
        raise TypeError(f"quick_init: {cls.__name__} is not a keyword-only frozen dataclass")
    template: dict[str, Any] = {}
    required: set[str] = set()
    factories: list[tuple[str, Callable[[], Any]]] = []
    for f in fields:
        template[f.name] = None if f.default is dataclasses.MISSING else f.default
        if f.default_factory is not dataclasses.MISSING:
            factories.append((f.name, f.default_factory))
        elif f.default is dataclasses.MISSING:
            required.add(f.name)
    names, needed, made = frozenset(template), frozenset(required), tuple(factories)

    def __init__(self: Any, **values: Any) -> None:
        if not needed.issubset(values) or not names.issuperset(values):
            raise TypeError(_refusal(cls, needed, names, values))
        attributes = self.__dict__
        attributes.update(template)  # Every field, in order (as the generated one sets them).
        attributes.update(values)
        for name, factory in made:
            if name not in values:
                attributes[name] = factory()

    generated = cls.__dict__["__init__"]  # The dataclass's own, for its signature.
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__doc__ = generated.__doc__
    __init__.__signature__ = inspect.signature(generated)  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]
    return cls


def _refusal(cls: type, needed: frozenset[str], names: frozenset[str], values: Any) -> str:
    """The `TypeError` message of a call that misses or invents arguments."""
    missing = sorted(needed.difference(values))
    unknown = sorted(set(values) - names)
    said = [f"missing {', '.join(map(repr, missing))}"] if missing else []
    said += [f"unexpected {', '.join(map(repr, unknown))}"] if unknown else []
    return f"{cls.__qualname__}.__init__() keyword arguments: {'; '.join(said)}"
