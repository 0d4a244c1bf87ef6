"""Labelled rows for `frontdesk eval`: the business's own files and three public data sets.

`DATA` is a CSV or JSONL file of the business's own rows, or `banking77:PATH`,
`clinc150:PATH`, `nlupp:PATH` naming the folder of a public set as published (the files
are read in place; see the data sets' README for their licences). For triage without an
app, each label becomes a `Category` whose examples are K rows of the set's training
split (for the business's own file, K rows per label taken from the file and left out of
the scoring). NLU++'s slots map to `HotelRequest`, shipped here, with dates as `date`,
times as `time` and numbers as `int`.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from frontdesk.errors import UserError
from frontdesk.experts.category import BUILTIN_NAMES, OTHER, Category
from frontdesk.orchestrator.evaluation import ExtractionRow, TriageRow

PUBLIC = ("banking77", "clinc150", "nlupp")
NLUPP_REFERENCE_DATE = dt.date(2022, 3, 15)
"""The day NLU++'s relative dates ("tomorrow") were resolved against."""
T = TypeVar("T")
_OUT_OF_SCOPE = {"oos", "out_of_scope", "other", "none"}


class DatasetError(UserError):
    """A data set cannot be read: missing, in another format, or a label that cannot be a
    category name; the message says which file and what to fix."""


class HotelRequest(BaseModel):
    """NLU++ hotels' slots as a request model (every slot optional, as in the data set)."""

    date: dt.date | None = Field(None, description="The specific date mentioned.")
    date_from: dt.date | None = Field(None, description="The start date of a period.")
    date_to: dt.date | None = Field(None, description="The end date of a period.")
    time: dt.time | None = Field(None, description="The specific time of day mentioned.")
    time_from: dt.time | None = Field(None, description="The start time of a period.")
    time_to: dt.time | None = Field(None, description="The end time of a period.")
    person_name: str | None = Field(None, description="The name of a person mentioned.")
    number: int | None = Field(None, description="A number mentioned without context.")
    kids: int | None = Field(None, description="The number of kids.")
    adults: int | None = Field(None, description="The number of adults.")
    people: int | None = Field(None, description="The number of people.")
    rooms: int | None = Field(None, description="The number of rooms.")


@dataclass(frozen=True)
class TriageData:
    """Rows to score, and the categories to build an app from when there is none."""

    name: str
    rows: list[TriageRow]
    categories: list[Category]
    """One per label, with up to K training examples each."""


@dataclass(frozen=True)
class ExtractionData:
    """Rows to extract, and the request model the set's loader provides (if it does)."""

    name: str
    rows: list[ExtractionRow]
    request: type[BaseModel] | None = None
    category: str | None = None
    reference_date: dt.date | None = None


def split_spec(data: str) -> tuple[str | None, Path]:
    """`banking77:PATH` -> ("banking77", PATH); a plain path -> (None, path)."""
    kind, sep, rest = data.partition(":")
    if sep and kind.lower() in PUBLIC:
        return kind.lower(), Path(rest)
    return None, Path(data)


def category_name(label: str) -> str:
    """The category a label becomes: `card_arrival` -> `CARD_ARRIVAL`; out of scope -> OTHER."""
    if label.strip().lower() in _OUT_OF_SCOPE:
        return OTHER
    name = re.sub(r"[^A-Z0-9]+", "_", label.strip().upper()).strip("_")
    if not name or not name[0].isalpha():
        name = "C_" + name
    return name[:64]


def load_triage(data: str, *, examples: int = 10, limit: int | None = None) -> TriageData:
    """The rows of `data` to route, and one category per label with `examples` examples.

    `limit` keeps that many rows, drawn in a fixed shuffled order (the same every run), so
    a short run still covers most labels.

    Raises:
        DatasetError: the files are missing or not in the set's format.
    """
    if examples < 0:
        raise DatasetError(f"--examples must be 0 or more, got {examples}")
    kind, path = split_spec(data)
    if kind == "banking77":
        train = _csv_pairs(path / "train.csv")
        test = _csv_pairs(path / "test.csv")
    elif kind == "clinc150":
        full = _json(path / "data_full.json")
        try:
            train = _pairs(full["train"], path)
            test = _pairs(full["test"], path) + _pairs(full["oos_test"], path)
        except (KeyError, TypeError) as e:
            raise DatasetError(f"{path / 'data_full.json'}: not CLINC150's data_full.json") from e
    elif kind == "nlupp":
        raise DatasetError(
            "NLU++ is multi-label (several intents per message); use it with"
            " `frontdesk eval extract nlupp:PATH`"
        )
    else:
        pairs = _own_rows(path, ("category",))
        train, test = _hold_out([(r["text"], str(r["category"])) for r in pairs], examples)
    categories = _categories(train, examples)
    rows = [TriageRow(text, category_name(label)) for text, label in test]
    return TriageData(name=data, rows=_limited(rows, limit), categories=categories)


def load_extraction(data: str, *, limit: int | None = None) -> ExtractionData:
    """The rows of `data` with their expected request fields.

    Raises:
        DatasetError: the files are missing or not in the format.
    """
    kind, path = split_spec(data)
    if kind == "nlupp":
        folds = sorted(path.glob("fold*.json"), key=lambda p: int(re.sub(r"\D", "", p.stem)))
        if not folds:
            raise DatasetError(f"{path}: no fold*.json files (NLU++'s hotels folder)")
        rows = [_nlupp_row(example, fold) for fold in folds for example in _json(fold)]
        return ExtractionData(
            name=data,
            rows=_limited(rows, limit),
            request=HotelRequest,
            category="HOTEL",
            reference_date=NLUPP_REFERENCE_DATE,
        )
    if kind is not None:
        raise DatasetError(f"{kind} has intents only; extraction needs fields (use nlupp:PATH)")
    own = _own_rows(path, ())
    rows = []
    for record in own:
        nested = record.get("request")
        expected = (
            dict(nested)
            if isinstance(nested, Mapping)
            else {k: v for k, v in record.items() if k != "text"}
        )
        rows.append(ExtractionRow(record["text"], {k: v for k, v in expected.items() if v != ""}))
    return ExtractionData(name=data, rows=_limited(rows, limit))


def _nlupp_row(example: Any, fold: Path) -> ExtractionRow:
    if not isinstance(example, Mapping) or not isinstance(example.get("text"), str):
        raise DatasetError(f"{fold}: an example without a `text` (not NLU++'s format)")
    expected: dict[str, Any] = {}
    for slot, info in (example.get("slots") or {}).items():
        value = info.get("value") if isinstance(info, Mapping) else None
        if slot not in HotelRequest.model_fields or value is None:
            continue  # date_period and time_period carry no canonical value.
        if isinstance(value, Mapping) and "day" in value:
            expected[slot] = dt.date(value["year"], value["month"], value["day"]).isoformat()
        elif isinstance(value, Mapping) and "hour" in value:
            expected[slot] = dt.time(value["hour"], value.get("minute", 0)).isoformat()
        else:
            expected[slot] = value
    return ExtractionRow(example["text"], expected)


def _categories(train: Sequence[tuple[str, str]], examples: int) -> list[Category]:
    by_label: dict[str, list[str]] = {}
    for text, label in train:
        by_label.setdefault(label, [])
        if len(by_label[label]) < examples:
            by_label[label].append(text)
    categories: dict[str, Category] = {}
    for label, texts in by_label.items():
        name = category_name(label)
        if name in BUILTIN_NAMES:
            continue  # Out of scope is the built-in OTHER, with its own description.
        if name in categories:
            raise DatasetError(f"the labels {label!r} and another both become {name}")
        categories[name] = Category(
            name=name,
            description=" ".join(label.replace("_", " ").split()).capitalize() + ".",
            request=None,
            handler=None,
            examples=texts,
        )
    return list(categories.values())


def _hold_out(
    pairs: Sequence[tuple[str, str]], examples: int
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The first `examples` rows of each label for training; the rest to score."""
    taken: dict[str, int] = {}
    train, test = [], []
    for text, label in pairs:
        if taken.get(label, 0) < examples and category_name(label) not in BUILTIN_NAMES:
            taken[label] = taken.get(label, 0) + 1
            train.append((text, label))
        else:
            test.append((text, label))
    return train, test


def _limited(rows: list[T], limit: int | None) -> list[T]:
    if limit is None or limit >= len(rows):
        return rows
    if limit < 1:
        raise DatasetError(f"--limit must be 1 or more, got {limit}")
    order = list(range(len(rows)))
    random.Random(0).shuffle(order)
    return [rows[i] for i in sorted(order[:limit])]


def _csv_pairs(path: Path) -> list[tuple[str, str]]:
    return [(r["text"], str(r["category"])) for r in _csv(path, ("category",))]


def _pairs(items: Iterable[Any], path: Path) -> list[tuple[str, str]]:
    out = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 2):
            raise DatasetError(f"{path}: expected [text, intent] pairs")
        out.append((str(item[0]), str(item[1])))
    return out


def _own_rows(path: Path, required: Sequence[str]) -> list[dict[str, Any]]:
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        return _jsonl(path, required)
    if path.suffix.lower() == ".csv":
        return _csv(path, required)
    raise DatasetError(
        f"{path}: expected a .csv or .jsonl file, or banking77:PATH, clinc150:PATH, nlupp:PATH"
    )


def _csv(path: Path, required: Sequence[str]) -> list[dict[str, Any]]:
    try:
        with path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise DatasetError(f"{path}: cannot read it: {e.strerror or e}") from e
    return [_checked(row, path, i + 2, required) for i, row in enumerate(rows)]


def _jsonl(path: Path, required: Sequence[str]) -> list[dict[str, Any]]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise DatasetError(f"{path}: cannot read it: {e.strerror or e}") from e
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path} line {number}: not JSON: {e.msg}") from e
        if not isinstance(row, dict):
            raise DatasetError(f"{path} line {number}: expected an object with `text`")
        rows.append(_checked(row, path, number, required))
    return rows


def _checked(row: dict[str, Any], path: Path, line: int, required: Sequence[str]) -> dict[str, Any]:
    for column in ("text", *required):
        value = row.get(column)
        if not isinstance(value, str) or not value.strip():
            raise DatasetError(f"{path} line {line}: `{column}` is missing or empty")
    return row


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DatasetError(f"{path}: cannot read it: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise DatasetError(f"{path}: not JSON: {e.msg}") from e
