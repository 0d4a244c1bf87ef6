"""`Outcome.data` is checked when the handler builds it, never at the database write."""

from __future__ import annotations

import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

from frontdesk import Outcome
from frontdesk.errors import InvalidOutcome, UserError


class Colour(enum.Enum):
    RED = "red"


class Payee(BaseModel):
    name: str
    limit: Decimal


def test_values_pydantic_writes_as_json_are_kept_in_their_json_form() -> None:
    when = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.UTC)
    ref = uuid.UUID("12345678-1234-5678-1234-567812345678")
    outcome = Outcome(
        instruction="x",
        data={
            "amount": Decimal("1.50"),
            "when": when,
            "day": dt.date(2026, 12, 1),
            "ref": ref,
            "colour": Colour.RED,
            "payee": Payee(name="Ann", limit=Decimal("10")),
            "nested": {"items": [Decimal("2"), (1, "a")]},
            "plain": [1, 2.5, True, None, "s"],
        },
    )
    assert outcome.data == {
        "amount": "1.50",
        "when": "2026-12-01T09:30:00Z",
        "day": "2026-12-01",
        "ref": "12345678-1234-5678-1234-567812345678",
        "colour": "red",
        "payee": {"name": "Ann", "limit": "10"},
        "nested": {"items": ["2", [1, "a"]]},
        "plain": [1, 2.5, True, None, "s"],
    }


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({"s": {1, 2}}, "data['s']"),
        ({"b": b"raw"}, "data['b']"),
        ({"n": float("nan")}, "data['n']"),
        ({"deep": {"list": [1, object()]}}, "data['deep']['list'][1]"),
        ({"keys": {1: "one"}}, "data['keys']"),
    ],
)
def test_anything_else_raises_at_construction_naming_the_key(
    data: dict[str, Any], where: str
) -> None:
    with pytest.raises(InvalidOutcome) as caught:
        Outcome(instruction="x", data=data)
    assert caught.value.key == where
    assert where in str(caught.value)
    assert isinstance(caught.value, UserError) and isinstance(caught.value, TypeError)


def test_a_set_gets_a_hint() -> None:
    with pytest.raises(InvalidOutcome, match="use a sorted list"):
        Outcome(instruction="x", data={"s": {1, 2}})
