"""`quick_init`: a frozen dataclass's `__init__` without one `object.__setattr__` per field.

A frozen dataclass's generated `__init__` sets each field through `object.__setattr__` (its
own `__setattr__` refuses): some 800 instructions a field, and a turn sets about 300 fields
of its frozen records (requests, responses, attempts, routes, decisions, the reply).
`quick_init` gives a keyword-only frozen dataclass an `__init__` that fills the instance's
`__dict__` at once: the same fields in the same order, the same defaults and factories,
the same `TypeError` for a missing or unknown argument, the same signature; the instances
stay frozen (their `__setattr__` still refuses). `evolved` is `dataclasses.replace` the same
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
    generated = cls.__dict__["__init__"]  # The dataclass's own, for its signature.
    __init__ = _quick_init_of(fields)
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__doc__ = generated.__doc__
    __init__.__signature__ = inspect.signature(generated)  # type: ignore[attr-defined]
    cls.__init__ = __init__  # type: ignore[misc]
    return cls


_FACTORY: Any = object()
"""The default of a field made by a factory (the generated `__init__`'s `_HAS_DEFAULT_FACTORY`)."""


def _quick_init_of(fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    """The quick `__init__` of a class of `fields`, written out as the generated one is
    (`exec`): its keyword-only parameters with their defaults, so Python checks the
    arguments and raises the generated one's `TypeError`s, and one dict of the fields in
    order, given to the instance's `__dict__` at once (a factory called for a field not
    passed): 8.2k instructions for the audit event's six fields, where the `**values`
    version it replaces took 13.1k and the generated one 13.4k."""
    scope: dict[str, Any] = {"__quick_factory__": _FACTORY}
    params, items = [], []
    for f in fields:
        name = f.name
        if f.default_factory is not dataclasses.MISSING:
            scope[f"__quick_make_{name}__"] = f.default_factory
            params.append(f"{name}=__quick_factory__")
            value = f"__quick_make_{name}__() if {name} is __quick_factory__ else {name}"
        elif f.default is not dataclasses.MISSING:
            scope[f"__quick_default_{name}__"] = f.default
            params.append(f"{name}=__quick_default_{name}__")
            value = name
        else:
            params.append(name)
            value = name
        items.append(f"{name!r}: {value}")
    keywords = f", *, {', '.join(params)}" if params else ""
    source = (
        f"def __init__(__quick_self__{keywords}):\n"
        f"    __quick_self__.__dict__.update({{{', '.join(items)}}})\n"
    )
    exec(source, scope)  # The text is made of the class's own field names.
    made: Callable[..., None] = scope["__init__"]
    return made


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
