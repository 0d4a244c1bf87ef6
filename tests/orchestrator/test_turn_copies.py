"""The turn's quick copies, each exactly what the long way makes: `evolved` (a frozen
dataclass with some fields changed: `dataclasses.replace`), `_turns` (a view's messages)
and `plain_messages` (a request's messages as plain dicts)."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

import pytest

from frontdesk.experts import Outcome
from frontdesk.experts.providers import ModelResponse
from frontdesk.experts.providers.base import plain_messages
from frontdesk.frozen import _copyable, evolved
from frontdesk.orchestrator._pipeline import Decided
from frontdesk.orchestrator.routing import Route, Triaged
from frontdesk.orchestrator.turn import _turns
from frontdesk.threads.builder import ExpertView, UserThread


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
    answered = {"response": ModelResponse(output="done")}
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


class _Message(dict):  # type: ignore[type-arg]
    """A dict of another type (a caller's own message class)."""


def test_messages_are_copied_as_the_list_comprehension_copied_them() -> None:
    plain = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]
    copied = plain_messages(plain)  # type: ignore[arg-type]
    assert copied == plain and copied is not plain
    assert all(a is b for a, b in zip(copied, plain, strict=True))
    mixed = [plain[0], _Message(role="assistant", content="yes")]
    made = plain_messages(mixed)  # type: ignore[arg-type]
    assert made[0] is plain[0] and type(made[1]) is dict and made[1] == mixed[1]


def test_a_views_turns_are_its_messages_and_any_other_role_a_user_turn() -> None:
    view = UserThread().for_expert("triage")
    assert _turns(view) == []
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes"}]
    view = ExpertView(messages=messages, cache_prefix_messages=0, fit=view.fit)
    turns = _turns(view)
    assert turns == messages and turns is not messages and turns[0] is messages[0]
    odd = ExpertView(
        messages=[*messages, {"role": "system", "content": "note"}],
        cache_prefix_messages=0,
        fit=view.fit,
    )
    assert _turns(odd)[-1] == {"role": "user", "content": "note"}
