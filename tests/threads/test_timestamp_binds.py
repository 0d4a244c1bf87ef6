"""`UTCDateTime` writes a UTC `datetime` on SQLite by `isoformat`: the same text, or the same
error, as SQLAlchemy's processor (`process_bind_param`, then SQLite's storage format)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy.dialects import postgresql

from frontdesk._driver import statement
from frontdesk.db import UTCDateTime


class _Moment(datetime):
    """A `datetime` subclass (the slow path's)."""


_ZONES = st.sampled_from(
    [
        UTC,
        timezone(timedelta(0)),
        timezone(timedelta(hours=5, minutes=30)),
        ZoneInfo("Europe/Paris"),
    ]
)
_VALUES = st.one_of(
    st.datetimes(timezones=_ZONES),
    st.datetimes(),  # Naive: refused.
    st.datetimes(timezones=st.just(UTC)).map(
        lambda d: _Moment(*d.timetuple()[:6], d.microsecond, tzinfo=UTC)
    ),
    st.dates(),
    st.none(),
)


def _processors(dialect: sa.engine.Dialect) -> tuple[Any, Any]:
    kind = UTCDateTime().dialect_impl(dialect)
    assert isinstance(kind, UTCDateTime)
    return kind.bind_processor(dialect), sa.TypeDecorator.bind_processor(kind, dialect)


def _outcome(process: Any, value: Any) -> tuple[str, Any]:
    try:
        return "text", process(value)
    except Exception as e:
        return "error", (type(e), str(e))


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_the_sqlite_text_is_sqlalchemys(value: Any) -> None:
    fast, slow = _processors(statement._PYSQLITE)
    assert fast is not slow
    assert _outcome(fast, value) == _outcome(slow, value)


def test_edges_and_other_dialects() -> None:
    fast, slow = _processors(statement._PYSQLITE)
    for value in (
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2024, 2, 29, 0, 0, 0, 0, tzinfo=UTC),
        datetime(2024, 2, 29, 0, 0, 0, 0, tzinfo=UTC, fold=1),
    ):
        assert fast(value) == slow(value)
    with pytest.raises(ValueError, match="naive datetime"):
        fast(datetime(2024, 1, 1))
    pg = postgresql.dialect()  # type: ignore[no-untyped-call]
    on_pg = UTCDateTime().dialect_impl(pg).bind_processor(pg)
    paris = datetime(2024, 7, 1, 12, tzinfo=ZoneInfo("Europe/Paris"))
    assert on_pg is not None and on_pg(paris) == paris and on_pg(paris).tzinfo is UTC
