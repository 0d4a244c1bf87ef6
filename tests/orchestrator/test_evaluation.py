"""`frontdesk.eval`: triage and extraction scored from the outcomes, never assumed."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from frontdesk.errors import ConfigError
from frontdesk.eval import (
    DatasetError,
    ExtractionRow,
    HotelRequest,
    TriageOutcome,
    TriageRow,
    evaluate_extraction,
    evaluate_triage,
    load_extraction,
    load_triage,
)
from frontdesk.experts import Category, Outcome
from frontdesk.orchestrator import Orchestrator
from frontdesk.testing import FunctionModel, ModelRequest

pytestmark = pytest.mark.anyio
DATA = Path(__file__).resolve().parents[1] / "data" / "eval"


class Refund(BaseModel):
    amount: Decimal
    reason: str
    when: dt.date | None = None


async def _handler(request: Any, context: Any) -> Outcome:
    return Outcome(instruction="Tell the user it is done.")


def _app(model: FunctionModel, *names: str) -> Orchestrator:
    categories = [
        Category(name=n, description=f"{n.lower()} things", request=None, handler=None)
        for n in names
    ]
    categories.append(
        Category(name="REFUND", description="refunds", request=Refund, handler=_handler)
    )
    return Orchestrator(categories, model=model, audit=False, memory=False, knowledge=False)


ROWS = [
    TriageRow("where is my card", "CARDS"),
    TriageRow("my card has not come", "CARDS"),
    TriageRow("what is the rate for euros", "RATES"),
    TriageRow("what's the weather", "OTHER"),
]


async def test_a_model_always_right_scores_one() -> None:
    labels = {r.text: r.category for r in ROWS}
    model = FunctionModel(
        lambda req: {"category": labels[req.messages[-1]["content"]]}, name="right"
    )
    report = await evaluate_triage(_app(model, "CARDS", "RATES"), ROWS)
    assert (report.accuracy, report.macro_f1, report.oos_recall) == (1.0, 1.0, 1.0)
    assert report.confusions == [] and report.errors == 0
    assert report.costs.messages == 4 and report.costs.model_calls == 4
    assert report.per_category["CARDS"].support == 2


async def test_a_model_always_answering_other_scores_the_class_balance() -> None:
    model = FunctionModel(lambda req: {"category": "OTHER"}, name="other")
    report = await evaluate_triage(_app(model, "CARDS", "RATES"), ROWS)
    assert report.accuracy == 1 / 4
    assert report.oos_recall == 1.0
    other = report.per_category["OTHER"]
    assert (other.precision, other.recall) == (0.25, 1.0)
    # Three labels (CARDS, RATES, OTHER); only OTHER has a non-zero F1 (2PR/(P+R) = 0.4).
    assert report.macro_f1 == pytest.approx(0.4 / 3)
    assert report.confusions[0] == {"expected": "CARDS", "predicted": "OTHER", "count": 2}
    assert set(report.to_json()) >= {
        "accuracy", "macro_f1", "per_category", "confusions", "oos_recall",
        "messages", "model_calls", "tokens", "p50_s", "p95_s", "cost_per_1000_usd",
    }  # fmt: skip


async def test_rows_already_scored_are_not_sent_again() -> None:
    model = FunctionModel(lambda req: {"category": "CARDS"}, name="cards")
    kept: list[TriageOutcome] = []
    first = await evaluate_triage(_app(model, "CARDS", "RATES"), ROWS[:2], on_result=kept.append)
    assert len(model.calls) == 2 and first.accuracy == 1.0
    again = await evaluate_triage(_app(model, "CARDS", "RATES"), ROWS, done=kept, concurrency=1)
    assert len(model.calls) == 4  # Only the two new rows.
    assert again.accuracy == 2 / 4


async def test_a_failed_call_counts_as_wrong_and_is_reported() -> None:
    def answer(req: ModelRequest) -> Any:
        if "weather" in req.messages[-1]["content"]:
            raise RuntimeError("provider down")
        return {"category": "CARDS"}

    report = await evaluate_triage(_app(FunctionModel(answer), "CARDS", "RATES"), ROWS)
    assert report.errors == 1
    assert [o.error for o in report.outcomes if o.error] == ["RuntimeError: provider down"]


async def test_a_label_the_app_lacks_is_refused() -> None:
    model = FunctionModel(lambda req: {"category": "OTHER"})
    with pytest.raises(ConfigError, match="RATES"):
        await evaluate_triage(_app(model, "CARDS"), ROWS)


async def test_extraction_compares_fields_after_the_models_validation() -> None:
    answers = {
        "refund 12 pounds, broken": {"amount": "12.00", "reason": "broken"},
        "refund 5, late": {"amount": "7", "reason": "late"},
        "refund please": None,
    }

    def answer(req: ModelRequest) -> Any:
        found = answers[req.messages[-1]["content"]]
        if found is None:
            return {"need_more_info": {"missing": ["amount"], "question": "How much?"}}
        return {"request": found}

    rows = [
        ExtractionRow("refund 12 pounds, broken", {"amount": 12, "reason": "broken"}),
        ExtractionRow("refund 5, late", {"amount": "5", "reason": "late"}),
        ExtractionRow("refund please", {"amount": 3}),
    ]
    report = await evaluate_extraction(_app(FunctionModel(answer)), "REFUND", rows)
    amount, reason = report.per_field["amount"], report.per_field["reason"]
    assert (amount.precision, amount.recall) == (0.5, 1 / 3)
    assert (reason.precision, reason.recall) == (1.0, 1.0)
    assert report.need_more_info_rate == pytest.approx(1 / 3)
    assert report.exact_match == pytest.approx(1 / 3)
    assert "when" not in report.per_field  # Never expected, never extracted.


async def test_extraction_names_a_bad_expected_value() -> None:
    model = FunctionModel(lambda req: {"request": {"amount": 1, "reason": "x"}})
    with pytest.raises(ConfigError, match="row 1: amount='twelve'"):
        await evaluate_extraction(_app(model), "REFUND", [ExtractionRow("x", {"amount": "twelve"})])
    with pytest.raises(ConfigError, match="Refund does not have"):
        await evaluate_extraction(_app(model), "REFUND", [ExtractionRow("x", {"colour": "red"})])
    with pytest.raises(ConfigError, match="no request model"):
        await evaluate_extraction(_app(model, "CARDS"), "CARDS", [])


def test_the_public_loaders_read_the_sets_as_published() -> None:
    banking = load_triage(f"banking77:{DATA / 'banking77'}", examples=2)
    assert [c.name for c in banking.categories] == [
        "CARD_ARRIVAL", "LOST_OR_STOLEN_CARD", "EXCHANGE_RATE"
    ]  # fmt: skip
    assert all(len(c.examples) == 2 for c in banking.categories) and len(banking.rows) == 9
    clinc = load_triage(f"clinc150:{DATA / 'clinc150'}", limit=5)
    assert len(clinc.rows) == 5 and "OTHER" not in [c.name for c in clinc.categories]
    assert (
        sum(r.category == "OTHER" for r in load_triage(f"clinc150:{DATA / 'clinc150'}").rows) == 3
    )
    hotels = load_extraction(f"nlupp:{DATA / 'nlupp-hotels'}")
    assert hotels.request is HotelRequest and len(hotels.rows) == 12
    assert hotels.rows[0].expected == {"date_from": "2022-03-16", "time_from": "18:35:00"}


def test_own_rows_hold_out_the_training_examples(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("text,category\na,X\nb,X\nc,X\nd,Y\ne,Y\nf,OTHER\n", encoding="utf-8")
    data = load_triage(str(path), examples=1)
    assert {c.name: c.examples for c in data.categories} == {"X": ("a",), "Y": ("d",)}
    assert [(r.text, r.category) for r in data.rows] == [
        ("b", "X"), ("c", "X"), ("e", "Y"), ("f", "OTHER")
    ]  # fmt: skip
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "hi"}\n', encoding="utf-8")
    with pytest.raises(DatasetError, match="line 1: `category` is missing"):
        load_triage(str(bad))
    with pytest.raises(DatasetError, match="multi-label"):
        load_triage("nlupp:somewhere")
