"""`evolved`: the turn's copy of a frozen dataclass with some fields changed, which must be
exactly what `dataclasses.replace` makes."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import pytest

from frontdesk.experts import Outcome
from frontdesk.orchestrator._pipeline import Decided, _copyable, evolved
from frontdesk.orchestrator.routing import Route, Triaged


def _decided() -> Decided:
    return Decided(
        category="BILLING",
        request=None,
        missing=None,
        outcome=Outcome(instruction="Say it is done."),
        handler_ran=True,
        answered={},
        flow={"how": "triage"},
    )


def test_a_copy_is_what_replace_makes() -> None:
    decided = _decided()
    answered = {"response": None}
    made = evolved(decided, answered=answered)
    assert made == dataclasses.replace(decided, answered=answered)
    assert type(made) is Decided and made is not decided
    assert made.answered is answered and made.flow is decided.flow  # Shallow, as replace.
    assert decided.answered == {}  # The original is untouched.
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.category = "OTHER"  # type: ignore[misc]
    route = Route(category="A", reason="r", how="triage", categories=("A", "B"))
    assert evolved(route, in_progress=None, kept=None) == dataclasses.replace(
        route, in_progress=None, kept=None
    )
    triaged = Triaged(category="A", reason="r")
    assert evolved(triaged, kept=None) == dataclasses.replace(triaged, kept=None)
    assert hash(evolved(triaged, kept=None)) == hash(triaged)


def test_a_name_that_is_not_a_field_is_refused_as_replace_refuses_it() -> None:
    with pytest.raises(TypeError):
        evolved(_decided(), nonsense=1)


@dataclass(frozen=True)
class _Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


@dataclass(frozen=True)
class _Derived:
    value: int

    @functools.cached_property
    def double(self) -> int:
        return 2 * self.value


@dataclass
class _Hidden:
    value: int
    seen: list[int] = field(init=False, default_factory=list)


def test_a_class_a_copy_could_get_wrong_goes_to_replace() -> None:
    """A `__post_init__` must run, a cached property must not be carried over stale, and a
    field outside `__init__` is `replace`'s to refuse or reset."""
    assert _copyable(_Checked) is None and _copyable(_Derived) is None
    assert _copyable(_Hidden) is None
    with pytest.raises(ValueError, match="negative"):
        evolved(_Checked(1), value=-1)
    derived = _Derived(1)
    assert derived.double == 2
    assert evolved(derived, value=5).double == 10
    hidden = _Hidden(1)
    hidden.seen.append(1)
    assert evolved(hidden, value=2).seen == []
    assert _copyable(Decided) is not None
