"""The offline stand-in worth testing with: BM25 routing that keeps a conversation's topic,
and extraction of strings, amounts, dates and times, one value per field."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from pydantic import BaseModel

from frontdesk.experts import Category, NeedMoreInfo
from frontdesk.experts.providers import Message, ModelRequest, OfflineModel
from frontdesk.experts.providers.offline import extract_fields
from frontdesk.experts.request import extraction_type
from frontdesk.experts.triage import triage_output_type

pytestmark = pytest.mark.anyio

TODAY = dt.date(2022, 3, 15)  # A Tuesday.


class Dispute(BaseModel):
    amount: Decimal
    reason: str


class Account(BaseModel):
    phone_number: str
    pin_number: str


class Stay(BaseModel):
    date_from: dt.date | None = None
    date_to: dt.date | None = None
    time: dt.time | None = None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("It's £12 too much, reason: charged twice", {"amount": Decimal("12")}),
        ("they took 12.50 EUR because the parcel never came", {"amount": Decimal("12.50")}),
        ("my reason is 'double billing' and it was USD 30", {"reason": "double billing"}),
    ],
)
def test_amounts_and_strings(text: str, expected: dict[str, object]) -> None:
    data, _missing = extract_fields(Dispute, [text])
    assert data.items() >= expected.items()


def test_the_reason_after_because_or_its_label() -> None:
    assert extract_fields(Dispute, ["£5: because the parcel never came"])[0] == {
        "amount": Decimal("5"),
        "reason": "the parcel never came",
    }


def test_two_number_fields_never_get_the_same_digits() -> None:
    data, missing = extract_fields(Account, ["phone number 0123 456 789, my PIN is 4321"])
    assert data == {"phone_number": "0123456789", "pin_number": "4321"} and missing == []
    data, missing = extract_fields(Account, ["it is 55512345"])
    assert data == {"phone_number": "55512345"} and missing == ["pin_number"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("arriving tomorrow until next Tuesday", (dt.date(2022, 3, 16), dt.date(2022, 3, 22))),
        ("from 1 June to 5 June", (dt.date(2022, 6, 1), dt.date(2022, 6, 5))),
        ("check in 2022-04-02, check out the 9th", (dt.date(2022, 4, 2), dt.date(2022, 4, 9))),
        ("from Monday for a week", (dt.date(2022, 3, 21), None)),
    ],
)
def test_dates_one_per_field(text: str, expected: tuple[dt.date, dt.date | None]) -> None:
    data, _missing = extract_fields(Stay, [text], today=TODAY)
    assert (data.get("date_from"), data.get("date_to")) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("at 7pm", dt.time(19, 0)),
        ("around 25 to 7 p.m.", dt.time(18, 35)),
        ("half past 6 in the evening", dt.time(18, 30)),
        ("at 09:15", dt.time(9, 15)),
        ("at noon", dt.time(12, 0)),
    ],
)
def test_times(text: str, expected: dt.time) -> None:
    assert extract_fields(Stay, [text], today=TODAY)[0]["time"] == expected


async def _handler(request: object, context: object) -> object:
    raise AssertionError("not run")


CATEGORIES = [
    Category(
        name="DISPUTE",
        description="Disputing a charge on the bill",
        request=Dispute,
        handler=_handler,  # type: ignore[arg-type]
        examples=["I want to dispute a charge", "this charge on my bill is wrong"],
    ),
    Category(
        name="PLAN_QUESTION",
        description="Questions about the price plan",
        request=None,
        handler=None,
        examples=["how much is my plan", "is my plan too expensive"],
    ),
]


async def _route(thread: list[Message]) -> str:
    output_type = triage_output_type(CATEGORIES)
    request = ModelRequest(expert="triage", system="", messages=thread, output_type=output_type)
    answer = (await OfflineModel().request(request)).output
    return str(answer.name)


async def test_an_answer_to_the_categorys_question_stays_in_it() -> None:
    thread: list[Message] = [
        {"role": "user", "content": "I want to dispute a charge on my bill"},
        {"role": "assistant", "content": "How much was wrong, and why?"},
        {"role": "user", "content": "It's £12 too much"},
    ]
    assert await _route(thread) == "DISPUTE"
    assert await _route(thread[-1:]) != "DISPUTE"  # On its own it points elsewhere.


async def test_a_new_clear_topic_after_a_question_changes_category() -> None:
    thread: list[Message] = [
        {"role": "user", "content": "I want to dispute a charge on my bill"},
        {"role": "assistant", "content": "How much was wrong, and why?"},
        {"role": "user", "content": "actually, how much is my plan?"},
    ]
    assert await _route(thread) == "PLAN_QUESTION"


async def test_asking_for_a_person_but_not_someone_stealing() -> None:
    person: list[Message] = [{"role": "user", "content": "can I speak to a real person"}]
    assert await _route(person) == "HUMAN"
    stolen: list[Message] = [{"role": "user", "content": "someone charged my bill twice"}]
    assert await _route(stolen) != "HUMAN"


async def test_the_request_expert_asks_only_for_what_is_missing() -> None:
    output_type = extraction_type(Dispute)
    thread: list[Message] = [{"role": "user", "content": "I was charged £12 too much"}]
    request = ModelRequest(expert="request", system="", messages=thread, output_type=output_type)
    answer = (await OfflineModel().request(request)).output
    assert isinstance(answer.need_more_info, NeedMoreInfo)
    assert answer.need_more_info.missing == ["reason"]
