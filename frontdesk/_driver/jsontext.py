"""`dumps`: the JSON text of a JSON column's value, exactly `json.dumps(value)`, for less.

SQLAlchemy writes a JSON column's value with `json.dumps` unless the dialect is given a
serializer. `json.dumps` with its default settings builds a new C encoder for every call,
which costs more than encoding a turn's small values (about 14 of them a turn: an outcome's
request, data, usage and models, a message's columns, a conversation's metadata). `dumps`
runs the encoder `json.dumps` builds, with the same settings, made once. The texts are the
ones stored before (the audit's hash chain covers them).
"""

from __future__ import annotations

import json
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

__all__ = ["dumps"]

_DEFAULTS = json.JSONEncoder()
"""`json.dumps`'s settings: ASCII only, `', '` and `': '`, NaN allowed, keys unsorted."""

_encode = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None,  # No circularity check (its markers would be shared): a cycle recurses, see `dumps`.
        _DEFAULTS.default,
        encode_basestring_ascii,
        None,
        _DEFAULTS.key_separator,
        _DEFAULTS.item_separator,
        _DEFAULTS.sort_keys,
        _DEFAULTS.skipkeys,
        _DEFAULTS.allow_nan,
    )
)
"""The C encoder `json.dumps` builds per call, built once. It keeps no state between calls
(no markers), so the writer's, the reader's and the event loop's threads can share it."""


def dumps(value: Any) -> str:
    """`json.dumps(value)`: the same text, or the same error.

    Anything the shared encoder refuses (a value that is not JSON, a cycle, which it meets
    as a `RecursionError` for want of markers) is handed to `json.dumps` itself, outside the
    `except`, so the error raised is `json.dumps`'s own, with no other chained to it."""
    if _encode is not None:
        try:
            return "".join(_encode(value, 0))
        except Exception:  # `json.dumps` below raises its own error.
            pass
    return json.dumps(value)
