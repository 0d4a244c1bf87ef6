"""`quick_init`: a frozen dataclass built by it is the one its generated `__init__` builds."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field

import pytest

from frontdesk.experts.providers.base import AttemptEvent, ModelRequest, ModelSettings
from frontdesk.frozen import quick_init


def _record() -> type:
    @dataclass(frozen=True, kw_only=True)
    class Record:
        name: str
        count: int = 0
        tags: list[str] = field(default_factory=list)
        note: str | None = None

    return Record


def test_an_instance_is_the_one_the_generated_init_makes() -> None:
    plain, quick = _record(), quick_init(_record())
    for kwargs in ({"name": "a"}, {"name": "b", "count": 2, "tags": ["x"], "note": "n"}):
        made, expected = quick(**kwargs), plain(**kwargs)
        assert vars(made) == vars(expected)
        assert list(vars(made)) == list(vars(expected))  # The fields' order too.
        assert repr(made).split(".")[-1] == repr(expected).split(".")[-1]
    assert quick(name="a").tags is not quick(name="a").tags  # A factory per instance.
    assert quick(name="a") == quick(name="a")
    assert dataclasses.replace(quick(name="a"), count=3) == quick(name="a", count=3)
    assert inspect.signature(quick) == inspect.signature(plain)


def test_it_stays_frozen_and_refuses_what_the_generated_init_refuses() -> None:
    quick = quick_init(_record())
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick(name="a").count = 1
    for kwargs in ({"count": 1}, {"name": "a", "colour": "red"}):  # The generated one's words.
        with pytest.raises(TypeError) as plainly:
            _record()(**kwargs)
        with pytest.raises(TypeError, match=str(plainly.value).split("__init__()")[1]):
            quick(**kwargs)
    with pytest.raises(TypeError):
        quick("a")  # Keyword-only, as before.


def test_only_a_keyword_only_frozen_dataclass_without_extras_is_taken() -> None:
    @dataclass(frozen=True)
    class Positional:
        name: str

    @dataclass(kw_only=True)
    class Mutable:
        name: str

    @dataclass(frozen=True, kw_only=True)
    class Checked:
        name: str

        def __post_init__(self) -> None:
            pass

    @dataclass(frozen=True, kw_only=True, slots=True)
    class Slotted:
        name: str

    for kind in (Positional, Mutable, Checked, Slotted):
        with pytest.raises(TypeError):
            quick_init(kind)


def test_the_turns_records_are_built_as_before() -> None:
    request = ModelRequest(expert="triage", system="s", messages=[])
    assert request.settings == ModelSettings() and request.metadata == {}
    assert request.metadata is not ModelRequest(expert="t", system="s", messages=[]).metadata
    event = AttemptEvent(expert="triage", model="m", attempt=1, latency_ms=1.0, request_body={})
    assert (event.will_retry, event.usage.input_tokens, event.first_token_ms) == (False, 0, None)
