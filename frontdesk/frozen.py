"""`quick_init`: a frozen dataclass's `__init__` without one `object.__setattr__` per field.

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__` (its
own `__setattr__` refuses): some 800 instructions a field, and a turn sets about 300 fields
of its frozen records (requests, responses, attempts, routes, decisions, the reply).
`quick_init` gives a keyword-only frozen dataclass an `__init__` that fills the instance's
`__dict__` at once: the same fields in the same order, the same defaults and factories,
a `TypeError` for a missing or unknown argument, the same signature; the instances stay
frozen (their `__setattr__` still refuses). `evolved` is `dataclasses.replace` the same
way: a copy of the instance's `__dict__` with the changes over it.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["evolved", "quick_init"]

C = TypeVar("C", bound=type)
D = TypeVar("D")


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


def evolved(value: D, /, **changes: Any) -> D:
    """`dataclasses.replace(value, **changes)`, made as a copy of `value`'s attributes with
    `changes` over them when its class allows (`_copyable`): `replace` passes every field
    through the frozen `__init__` again, five times the cost, and a turn makes half a
    dozen of these. Any other class, or a name that is not a field, goes to `replace`."""
    kind: type = type(value)
    names = _copyable(kind)
    if names is None or not names.issuperset(changes):
        return dataclasses.replace(value, **changes)  # type: ignore[type-var]
    made: Any = object.__new__(kind)
    attributes = made.__dict__
    attributes.update(vars(value))
    attributes.update(changes)
    return made  # type: ignore[no-any-return]


@functools.cache
def _copyable(kind: type) -> frozenset[str] | None:
    """The field names of a dataclass whose copy is `replace`'s: every field in `__init__`
    and nothing else in its instances' `__dict__` (no `__post_init__`, no slots, no cached
    property a change could leave stale); `None` for any other class."""
    if not dataclasses.is_dataclass(kind) or hasattr(kind, "__post_init__"):
        return None
    if "__slots__" in kind.__dict__ or any(
        isinstance(member, functools.cached_property)
        for base in kind.__mro__
        for member in vars(base).values()
    ):
        return None
    fields = dataclasses.fields(kind)
    if any(not f.init for f in fields):
        return None
    return frozenset(f.name for f in fields)
