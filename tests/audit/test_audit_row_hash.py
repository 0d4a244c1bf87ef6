"""The row hash written at append time equals `audit.chain.row_hash` for every kind of text."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from unittest.mock import patch

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from pydantic_core import to_jsonable_python

from frontdesk.audit import blobs, crypto
from frontdesk.audit.chain import canonical_json, row_hash
from frontdesk.audit.store import spliced_row_hash

TEXTS = [
    "plain",
    "café, 日本語 and an emoji 🥔",
    "a lone surrogate \ud800 in the payload",
    'quotes " and backslashes \\ and control \x01 characters',
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("conversation_id", ["conv-1", "conversación-ü", 'a "quoted"\\id\x07'])
@pytest.mark.parametrize("prompt_sha256", [None, "ab" * 32])
def test_the_spliced_hash_is_the_chain_hash(
    text: str, conversation_id: str, prompt_sha256: str | None
) -> None:
    payload = {"text": text, "nested": {"b": [1, 2.5, None, True], "a": text}}
    fields = {
        "conversation_id": conversation_id,
        "seq": 7,
        "event_id": "e-1",
        "kind": "reply",
        "turn_id": "t-1",
        "created_at": "2026-01-01T00:00:00.000000+00:00",
        "prompt_sha256": prompt_sha256,
        "prev_hash": "0" * 64,
    }
    expected = row_hash(payload=payload, **fields)  # type: ignore[arg-type]
    spliced = spliced_row_hash(payload_json=canonical_json(payload), **fields)  # type: ignore[arg-type]
    assert spliced == expected
    # The payload really went through its canonical text (a changed payload changes the hash).
    other = canonical_json({**payload, "text": text + "!"})
    assert spliced_row_hash(payload_json=other, **fields) != expected  # type: ignore[arg-type]
    assert json.loads(canonical_json(payload)) == json.loads(json.dumps(payload))


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(_JSON)
def test_canonical_json_of_plain_values_is_unchanged_by_the_fast_path(value: object) -> None:
    slow = json.dumps(
        to_jsonable_python(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    try:
        slow.encode("utf-8")
    except UnicodeEncodeError:
        slow = json.dumps(
            to_jsonable_python(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True
        )
    assert canonical_json(value) == slow


T0 = datetime(2026, 3, 1, tzinfo=UTC)
_FIELDS = {"text", "messages", "request_body", "output", "error"} | set(crypto.CLEAR_FIELDS)
"""Payload keys: content fields (packed) and clear ones (kept as they are)."""
_WEIRD = st.one_of(
    _JSON,
    st.dictionaries(st.integers(), st.text(max_size=4), max_size=3),  # Keys `json` converts.
    st.datetimes(timezones=st.just(UTC)),  # A value `canonical_json` converts.
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=2),
    st.just("a literal \\ud800, not a surrogate"),
)


@given(st.dictionaries(st.sampled_from(sorted(_FIELDS)), _WEIRD, max_size=6))
@example({"text": {0: "a", 10: "b", 9: "c"}, "output": "é"})  # Keys `json` turns to text.
@example({"text": "x\ud800", "model": "é"})  # A surrogate: every non-ASCII text escaped.
@example({"model": "x\ud800", "text": "é"})
@example({"usage": {"n": 1, "m": [1.5, None]}, "settings": {1: 2}, "output": T0})
@example({"text": "a literal \\ud800 " * 9, "error": 'quotes " \\ and \x01'})
def test_the_payload_text_joined_from_packing_is_its_canonical_json(
    payload: dict[str, object],
) -> None:
    """`Packer.payload` joins the texts packing made instead of encoding the payload again:
    the text must be what `canonical_json` writes of the packed payload, or a row would
    fail `audit verify` (which checks the canonical form)."""
    addresses = blobs.Addresses(None)
    for _ in range(2):  # Cold, then with every part cached.
        packer = blobs.Packer(addresses)
        packed, text = packer.payload(payload, crypto.CLEAR_FIELDS)
        expected = {
            k: v if k in crypto.CLEAR_FIELDS else blobs.Packer(addresses).pack(v)
            for k, v in payload.items()
        }
        assert packed == expected
        assert text == canonical_json(expected)


class _Text(str):
    """A text of a subclass (`json` writes it as a text, packing stores it as one)."""


_MARK_KEYS = st.sampled_from([blobs.BLOB, blobs.LIST, blobs.ESCAPE])
_NEAR = st.text(alphabet='ab"\\\n\x01é\ud800', min_size=40, max_size=56)
"""Texts about `MIN_TEXT` long, escapes and surrogates among them."""
_PACKABLE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _NEAR
    | _MARK_KEYS,
    lambda children: (
        st.lists(children, max_size=7)
        | st.dictionaries(st.text(max_size=3) | _MARK_KEYS, children, max_size=7)
    ),
    max_leaves=24,
)


@given(st.dictionaries(st.text(max_size=3) | _MARK_KEYS, _PACKABLE, max_size=7))
@example({"a": "x" * 47, "b": [1, 2]})
@example({"a": "x" * 48})
@example({"a": "x" * 46 + '"'})  # 47 characters, a longer JSON text.
@example({"a": '"' * 48})
@example({blobs.BLOB: "r"})
@example({"a": {blobs.LIST: []}})
@example({"a": "x" * 40, "b": "y" * 40, "c": "z" * 40, "d": "w" * 40, "e": "v" * 30})
@example({"a": [["x" * 30] * 4] * 2})
@example({"a": ["x" * 48]})  # A long text inside: only the whole text shows it.
@example({"a": {"b": "x" * 47 + "\n"}})
@example({"a": (_Text("x" * 48),)})  # A text of a subclass, in a tuple.
def test_a_dict_kept_whole_packs_as_it_does_part_by_part(value: dict[object, object]) -> None:
    """A short dict is written in C at once (`_kept_whole`) rather than packed part by part:
    only when packing would leave it as it is (its refs, blobs and text the same)."""
    fast = blobs.Packer(blobs.Addresses(None))
    slow = blobs.Packer(blobs.Addresses(None))
    fast_text = fast._value(value)[1]
    with patch.object(blobs, "_kept_whole", lambda _: None):
        slow_packed, slow_text = slow._value(value)
    assert fast_text == slow_text
    assert canonical_json(fast.pack(value)) == canonical_json(slow_packed)
    assert fast.made == slow.made


def test_a_message_kept_whole_is_cached_as_a_copy() -> None:
    """A short message's packing is cached: the cache keeps its own copy, so the caller's
    dict changed afterwards does not change what an equal message packs as later."""
    addresses = blobs.Addresses(None)
    message = {"role": "user", "content": "hi"}
    assert blobs.Packer(addresses).pack(message) == {"role": "user", "content": "hi"}
    message["content"] = "changed"
    assert blobs.Packer(addresses).pack({"role": "user", "content": "hi"}) == {
        "role": "user",
        "content": "hi",
    }
