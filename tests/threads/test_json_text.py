"""JSON columns are written by `frontdesk._driver.jsontext.dumps`: the same text as
`json.dumps(value)` (the audit's hash chain covers it), and the same error for a value
`json.dumps` refuses."""

from __future__ import annotations

import enum
import json
import math
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from frontdesk._driver import statement
from frontdesk._driver.jsontext import dumps
from frontdesk._driver.writer import sync_twin
from frontdesk.db import create_engine, dispose_engine


class _Colour(enum.IntEnum):
    RED = 1


class _Tagged(dict[str, Any]):
    """A dict subclass (encoded as a dict)."""


_KEYS = st.one_of(
    st.text(),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.none(),
    st.tuples(st.integers()),  # Not a JSON key: refused.
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(),  # NaN and the infinities included (`json.dumps` allows them).
    st.text(),  # Lone surrogates and non-ASCII included.
    st.sampled_from([_Colour.RED, b"bytes", {1, 2}, object(), 1j]),  # Some are not JSON.
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(_KEYS, inner, max_size=4),
        st.dictionaries(st.text(), inner, max_size=3).map(_Tagged),
    ),
    max_leaves=20,
)


def _outcome(encode: Any, value: Any) -> tuple[str, Any]:
    try:
        return "text", encode(value)
    except Exception as e:
        return "error", (type(e), str(e), e.__context__ is None)


@settings(max_examples=500, deadline=None)
@given(_VALUES)
def test_dumps_is_json_dumps(value: Any) -> None:
    assert _outcome(dumps, value) == _outcome(json.dumps, value)


def test_a_cycle_is_refused_as_json_dumps_refuses_it() -> None:
    cycle: list[Any] = [1]
    cycle.append({"again": cycle})
    assert _outcome(dumps, cycle) == _outcome(json.dumps, cycle)
    assert _outcome(dumps, cycle)[1][:2] == (ValueError, "Circular reference detected")
    shared = [1, 2]  # The same list twice is no cycle, before or after a refused value.
    assert dumps({"a": shared, "b": shared}) == json.dumps({"a": shared, "b": shared})


def test_special_floats_and_top_level_texts() -> None:
    for value in (math.nan, math.inf, -math.inf, 0.1, "é\ud800", "plain", _Colour.RED):
        assert dumps(value) == json.dumps(value)


def test_json_columns_bind_through_it() -> None:
    """The `Statement`s' SQLite dialect and the engines' dialects use it."""
    process = sa.JSON().dialect_impl(statement._PYSQLITE).bind_processor(statement._PYSQLITE)
    assert process is not None
    assert process({"é": [1.5, None]}) == json.dumps({"é": [1.5, None]})
    assert statement._PYSQLITE._json_serializer is dumps


@pytest.mark.anyio
async def test_the_engines_write_json_through_it(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'json.db'}")
    try:
        twin = sync_twin(engine)
        assert engine.dialect._json_serializer is dumps
        assert twin.dialect._json_serializer is dumps
        twin.dispose()
    finally:
        await dispose_engine(engine)
    assert create_engine("postgresql://u@h/db").dialect._json_serializer is dumps
