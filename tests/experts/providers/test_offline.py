"""OfflineModel: the deterministic stand-in, on the shared scenarios."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from frontdesk.experts import NeedMoreInfo
from frontdesk.experts.providers import (
    AttemptEvent,
    Message,
    ModelRequest,
    model_from_spec,
    observe_attempts,
)
from frontdesk.experts.providers._offline_routing import tokens
from frontdesk.experts.providers.offline import LABEL, OfflineModel

pytestmark = pytest.mark.anyio

SCENARIOS = Path(__file__).resolve().parents[3] / "tests" / "data"


def scenario(name: str) -> dict[str, Any]:
    path = SCENARIOS / f"{name}.json"
    return json.loads(path.read_text())  # type: ignore[no-any-return]


class OrderRequest(BaseModel):
    variety: Literal["purple", "idaho", "maris piper"]
    bags: int = Field(ge=1, le=50)


class OrderRequestExtraction(BaseModel):
    request_model: ClassVar[type[BaseModel]] = OrderRequest
    request: OrderRequest | None = None
    need_more_info: NeedMoreInfo | None = None


class RefundRequest(BaseModel):
    order_number: str
    reason: str | None = None


class RefundRequestExtraction(BaseModel):
    request_model: ClassVar[type[BaseModel]] = RefundRequest
    request: RefundRequest | None = None
    need_more_info: NeedMoreInfo | None = None


CategoryName = enum.Enum(  # type: ignore[misc]
    "CategoryName", {n: n for n in ("ORDERS", "REFUND", "OTHER", "HUMAN")}, type=str
)


class Triage(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-frontdesk-categories": {
                "ORDERS": {
                    "description": "Buying potatoes: new orders and changes to an order",
                    "examples": ["I'd like a bag of purple potatoes", "make it two bags"],
                },
                "REFUND": {
                    "description": "Refunds for late, missing or damaged deliveries",
                    "examples": ["my order arrived late, I want my money back"],
                },
            }
        }
    )
    category: CategoryName
    reason: str


def request(
    messages: list[Message], output_type: type[BaseModel] | None, expert: str
) -> ModelRequest:
    return ModelRequest(expert=expert, system="", messages=messages, output_type=output_type)


async def test_potatoes_scenario_request_and_category_each_turn() -> None:
    model = OfflineModel()
    thread: list[Message] = []
    for turn in scenario("potatoes")["turns"]:
        thread.append({"role": "user", "content": turn["user"]})
        extracted = (
            await model.request(request(list(thread), OrderRequestExtraction, "request"))
        ).output
        assert extracted.need_more_info is None, turn["user"]
        assert extracted.request.model_dump() == turn["expect"]["request"], turn["user"]
        routed = (await model.request(request(list(thread), Triage, "triage"))).output
        assert routed.category.value == turn["expect"]["category"], turn["user"]
        assert routed.reason.startswith(LABEL)
        reply = (
            f"{LABEL} Please confirm: {extracted.request.bags} bags of {extracted.request.variety}."
        )
        thread.append({"role": "assistant", "content": reply})


async def test_priya_first_turn_order_number_and_refund() -> None:
    first = scenario("priya-late-delivery")["turns"][0]
    thread: list[Message] = [{"role": "user", "content": first["user"]}]
    model = OfflineModel()
    extracted = (await model.request(request(thread, RefundRequestExtraction, "request"))).output
    assert extracted.request.model_dump(exclude_none=True) == first["expect"]["request"]
    routed = (await model.request(request(thread, Triage, "triage"))).output
    assert routed.category.value == first["expect"]["category"]


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("Can I talk to a real person please?", "HUMAN"),
        ("I want to speak to an agent", "HUMAN"),
        ("What's the weather like on Mars?", "OTHER"),
        ("hello", "OTHER"),
    ],
)
async def test_triage_human_and_other(text: str, category: str) -> None:
    routed = await OfflineModel().request(
        request([{"role": "user", "content": text}], Triage, "triage")
    )
    assert routed.output.category.value == category


class CardCategory(enum.StrEnum):
    CARD_ARRIVAL = "CARD_ARRIVAL"
    CARD_CHARGE = "CARD_CHARGE"
    CANCEL_TRANSFER = "CANCEL_TRANSFER"
    VERIFY_IDENTITY = "VERIFY_IDENTITY"
    OTHER = "OTHER"
    HUMAN = "HUMAN"


class CardTriage(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "x-frontdesk-categories": {
                "CARD_ARRIVAL": {
                    "description": "When a card ordered will come",
                    "examples": ["When will my new card arrive?"],
                },
                "CARD_CHARGE": {
                    "description": "An unexpected card fee",
                    "examples": ["Why is there a charge for my card?"],
                },
                "CANCEL_TRANSFER": {
                    "description": "Stop a payment that went out",
                    "examples": ["Please cancel the transfer I made"],
                },
                "VERIFY_IDENTITY": {
                    "description": "Proving who you are",
                    "examples": ["How do I verify my identity?"],
                },
                "OTHER": {"description": "Anything else", "examples": ["Hello!"]},
                "HUMAN": {"description": "A person", "examples": ["Can I talk to a human?"]},
            }
        }
    )
    category: CardCategory
    reason: str


@pytest.mark.parametrize(
    ("text", "category"),
    [
        # Another form of the example's word: -ed, -es, a doubled consonant, -ied.
        ("I was charged for my card twice", "CARD_CHARGE"),
        ("The card charges look wrong", "CARD_CHARGE"),
        ("I cancelled a transfer by mistake, can it be undone?", "CANCEL_TRANSFER"),
        ("My identity still isn't verified", "VERIFY_IDENTITY"),
        # A number is a value, not a topic: it does not push the message out of scope.
        ("Card 4242 ordered on 3 March has not arrived after 14 days", "CARD_ARRIVAL"),
    ],
)
async def test_triage_meets_the_forms_of_a_word(text: str, category: str) -> None:
    routed = await OfflineModel().request(
        request([{"role": "user", "content": text}], CardTriage, "triage")
    )
    assert routed.output.category.value == category, routed.output.reason


def test_routing_words_are_stemmed_and_read_not_as_a_word() -> None:
    assert tokens("My card hasn't arrived") == ["card", "has", "not", "arriv"]
    assert tokens("charge charged charges charging") == ["charg"] * 4
    assert tokens("Where is it? When did it go?") == ["wher", "when", "did", "go"]
    assert tokens("I’ve topped up, it won’t show") == ["top", "up", "not", "show"]


async def test_missing_fields_ask_with_choices() -> None:
    thread: list[Message] = [{"role": "user", "content": "I'd like some potatoes"}]
    out = (await OfflineModel().request(request(thread, OrderRequestExtraction, "request"))).output
    assert out.request is None
    assert out.need_more_info.missing == ["variety", "bags"]
    assert "purple, idaho or maris piper" in out.need_more_info.question
    assert out.need_more_info.question.startswith(LABEL)


async def test_out_of_range_number_is_asked_again() -> None:
    thread: list[Message] = [{"role": "user", "content": "ninety bags... no, 200 bags of idaho"}]
    out = (await OfflineModel().request(request(thread, OrderRequestExtraction, "request"))).output
    assert out.need_more_info is not None and out.need_more_info.missing == ["bags"]


async def test_response_follows_the_instruction() -> None:
    thread: list[Message] = [
        {"role": "user", "content": "I'd like to buy a bag of purple potatoes"},
        {
            "role": "assistant",
            "content": "Ask the user to confirm buying one bag of purple potatoes",
        },
    ]
    reply = await OfflineModel().request(request(thread, None, "response"))
    assert reply.output == "[offline] Please confirm: buying one bag of purple potatoes."


@pytest.mark.parametrize(
    ("instruction", "expected"),
    [
        (
            "Ask the user which variety they want",
            "[offline] Could you tell me which variety you want?",
        ),
        ("Tell the user that their refund is on its way.", "[offline] Your refund is on its way."),
        ("Hand the user over to a person", "[offline] Hand you over to a person."),
    ],
)
async def test_response_phrasings(instruction: str, expected: str) -> None:
    thread: list[Message] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": instruction},
    ]
    assert (await OfflineModel().request(request(thread, None, "response"))).output == expected


async def test_summary_keeps_names_numbers_and_requests() -> None:
    turns = scenario("priya-late-delivery")["turns"]
    thread: list[Message] = []
    for turn in turns[:6]:
        thread.append({"role": "user", "content": turn["user"]})
        thread.append({"role": "assistant", "content": "[offline] Noted."})
    summary = (await OfflineModel().request(request(thread, None, "summariser"))).output
    assert summary.startswith("[offline summary]")
    for kept in ("Priya", "88213", "3 March", "40 minutes", "change my delivery address"):
        assert kept in summary
    assert "Noted" not in summary
    assert len(summary) < sum(len(m["content"]) for m in thread)
    again = (
        await OfflineModel().request(
            request([{"role": "user", "content": summary}, *thread[-2:]], None, "summariser")
        )
    ).output
    assert "88213" in again and again.count("[offline summary]") == 1


async def test_offline_is_labelled_and_reports_an_attempt() -> None:
    events: list[AttemptEvent] = []
    model = model_from_spec("offline")
    with observe_attempts(events.append):
        response = await model.request(
            request([{"role": "user", "content": "hi"}], None, "response")
        )
    assert model.name == "offline" and response.model == "offline"
    assert response.output.startswith(LABEL)
    assert len(events) == 1 and events[0].model == "offline"
