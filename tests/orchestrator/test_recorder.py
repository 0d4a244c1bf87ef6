"""The turn recorder's view of a wire body: the system prompt's text replaced by its reference."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from frontdesk.orchestrator._recorder import _prompt_reference, without_system

SYSTEM = "You route customer messages."

_leaves = st.one_of(st.sampled_from([SYSTEM, "user", "hi"]), st.integers(), st.none())
_bodies = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=20,
)


def _replaced(body: Any, reference: str) -> Any:
    """What the recorder keeps: a copy of `body` with every `SYSTEM` the reference."""
    if isinstance(body, str):
        return reference if body == SYSTEM else body
    if isinstance(body, list):
        return [_replaced(item, reference) for item in body]
    if isinstance(body, dict):
        return {key: _replaced(value, reference) for key, value in body.items()}
    return body


@given(_bodies)
def test_every_copy_of_the_system_prompt_is_replaced_and_the_body_left_as_it_was(
    body: Any,
) -> None:
    before = repr(body)
    kept = without_system(body, SYSTEM)
    assert kept == _replaced(body, _prompt_reference(SYSTEM))
    assert repr(body) == before  # The wire body itself is not changed.
    assert SYSTEM not in repr(kept)


def test_usage_is_recorded_with_every_field() -> None:
    import dataclasses

    from frontdesk.experts.providers import Usage
    from frontdesk.orchestrator._recorder import usage_dict

    usage = Usage(input_tokens=1, output_tokens=2, cache_read_tokens=3, cache_write_tokens=4)
    assert usage_dict(usage) == dataclasses.asdict(usage)
    assert list(usage_dict(usage)) == [f.name for f in dataclasses.fields(Usage)]


_messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant"]),
            "content": st.sampled_from([SYSTEM, "hi", "You route"]) | _bodies,
        }
    ),
    max_size=6,
)


@given(_messages)
def test_a_thread_of_messages_is_read_as_any_body(messages: list[dict[str, Any]]) -> None:
    """The messages of a wire body are read without a call each (`_without`'s fast path for
    a dict of plain strings): the same copy, and the very same objects where nothing is
    replaced."""
    body = {"system": SYSTEM, "messages": messages}
    kept = without_system(body, SYSTEM)
    assert kept == _replaced(body, _prompt_reference(SYSTEM))
    if SYSTEM not in repr(messages):
        assert kept["messages"] is messages
    for sent, recorded in zip(messages, kept["messages"], strict=True):
        assert (recorded is sent) == (SYSTEM not in repr(sent))
