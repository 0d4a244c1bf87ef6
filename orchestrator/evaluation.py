"""How well an app routes and extracts: its experts run over labelled rows, the scores computed.

`evaluate_triage` sends each row's text, as a one-message thread, to the app's own triage
expert (its prompt, categories and model) and compares the category it picks with the
row's; `evaluate_extraction` does the same with one category's request expert and the
row's expected fields. No turn runs: no handler acts, nothing is stored, so an evaluation
can run over thousands of rows of a public data set without touching a database.

Rows run concurrently; `done` and `on_result` let a caller keep each row's outcome as it
comes (the CLI appends them to a file) and skip those already scored on a second run, so
an interrupted evaluation resumes where it stopped. Every figure is computed from the
outcomes: a model that always answers `OTHER` scores exactly the share of `OTHER` rows.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from frontdesk.audit.pricing import cost_of
from frontdesk.errors import ConfigError
from frontdesk.experts.category import OTHER
from frontdesk.experts.providers import Message, ModelResponse
from frontdesk.orchestrator._orchestrator import Orchestrator
from frontdesk.orchestrator._router import Router
from frontdesk.orchestrator.evaluation_routing import RouterFigures, RouterScore, router_figures

DEFAULT_CONCURRENCY = 8
TOP_CONFUSIONS = 10


@dataclass(frozen=True)
class TriageRow:
    """One labelled message: its text and the category it belongs to (`OTHER`: none)."""

    text: str
    category: str


@dataclass(frozen=True)
class ExtractionRow:
    """One message and the request fields it states (a field left out is expected unset)."""

    text: str
    expected: Mapping[str, Any]


@dataclass(frozen=True)
class Usage:
    """What answering one row took."""

    seconds: float = 0.0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    cost_known: bool = True


@dataclass(frozen=True)
class TriageOutcome:
    """One row scored: the category expected and the one the model picked."""

    index: int
    expected: str
    predicted: str | None
    """`None` when the call failed (`error` says why); it counts as wrong."""
    usage: Usage
    error: str | None = None
    router: RouterScore | None = None
    """The router's best category and scores (an app with a router); when it `routed`,
    `predicted` is its category and no triage call was made."""


@dataclass(frozen=True)
class ExtractionOutcome:
    """One row scored: the fields expected and those extracted (JSON values)."""

    index: int
    expected: dict[str, Any]
    predicted: dict[str, Any]
    need_more_info: list[str] | None
    usage: Usage
    error: str | None = None
    correct: list[str] = field(default_factory=list)
    """The expected fields extracted with an equal value (compared as the request model's
    values, so `Decimal("12.00")` equals an expected `12`)."""


@dataclass(frozen=True)
class Scores:
    """Precision, recall and F1 of one category or field, with how many rows had it."""

    precision: float
    recall: float
    f1: float
    support: int


@dataclass(frozen=True)
class Costs:
    """Tokens, model calls, time and money over the scored rows."""

    messages: int
    model_calls: int
    tokens: dict[str, float]
    """`input`, `output`, `total`, and `per_message` (the total's mean)."""
    model_calls_per_message: float
    p50_s: float
    p95_s: float
    cost_per_1000_usd: float
    cost_known: bool
    """False when some model's price is not in the pricing table (its cost counted as 0)."""


@dataclass(frozen=True)
class TriageReport:
    """How well triage routed the rows."""

    accuracy: float
    macro_f1: float
    per_category: dict[str, Scores]
    confusions: list[dict[str, Any]]
    """The most frequent mistakes: `{"expected", "predicted", "count"}`, most frequent first."""
    oos_recall: float | None
    """Share of the rows labelled `OTHER` (out of scope) routed to `OTHER`; `None` without any."""
    in_scope_accuracy: float | None
    """Accuracy over the rows not labelled `OTHER` (CLINC150's in-scope accuracy); `None`
    when every row is in scope (then it is `accuracy`)."""
    errors: int
    costs: Costs
    outcomes: list[TriageOutcome] = field(repr=False)
    router: RouterFigures | None = None
    """The router's share, precision and curve (an app with a router)."""

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object (the costs' figures at the top level)."""
        data = {k: v for k, v in asdict(self).items() if k not in ("costs", "outcomes")}
        return data | asdict(self.costs)

    def text(self) -> str:
        """A short summary for a terminal."""
        lines = [
            f"messages {self.costs.messages}, accuracy {self.accuracy:.3f},"
            f" macro-F1 {self.macro_f1:.3f}"
            + ("" if self.oos_recall is None else f", out-of-scope recall {self.oos_recall:.3f}")
            + (
                ""
                if self.in_scope_accuracy is None
                else f", in-scope accuracy {self.in_scope_accuracy:.3f}"
            )
        ]
        if self.errors:
            lines.append(f"{self.errors} call(s) failed (counted as wrong)")
        lines.append(_costs_line(self.costs))
        if self.router is not None:
            lines.append(self.router.text())
        if self.confusions:
            lines.append("most frequent confusions (expected -> predicted):")
            lines += [
                f"  {c['count']:>4}  {c['expected']} -> {c['predicted']}" for c in self.confusions
            ]
        return "\n".join(lines)


@dataclass(frozen=True)
class ExtractionReport:
    """How well one category's request expert extracted the rows' fields."""

    category: str
    micro_f1: float
    exact_match: float
    """Share of rows whose every field (expected or extracted) is right."""
    per_field: dict[str, Scores]
    need_more_info_rate: float
    errors: int
    costs: Costs
    outcomes: list[ExtractionOutcome] = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object (the costs' figures at the top level)."""
        data = {k: v for k, v in asdict(self).items() if k not in ("costs", "outcomes")}
        return data | asdict(self.costs)

    def text(self) -> str:
        """A short summary for a terminal."""
        lines = [
            f"{self.category}: messages {self.costs.messages}, micro-F1 {self.micro_f1:.3f},"
            f" exact match {self.exact_match:.3f},"
            f" need-more-info rate {self.need_more_info_rate:.3f}"
        ]
        if self.errors:
            lines.append(f"{self.errors} call(s) failed (counted as extracting nothing)")
        lines.append(_costs_line(self.costs))
        for name, s in self.per_field.items():
            lines.append(
                f"  {name:<20} P {s.precision:.3f}  R {s.recall:.3f}  F1 {s.f1:.3f}"
                f"  ({s.support} expected)"
            )
        return "\n".join(lines)


R = TypeVar("R", TriageRow, ExtractionRow)
Out = TypeVar("Out", TriageOutcome, ExtractionOutcome)


async def evaluate_triage(
    orch: Orchestrator,
    rows: Sequence[TriageRow],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    done: Iterable[TriageOutcome] = (),
    on_result: Callable[[TriageOutcome], None] | None = None,
) -> TriageReport:
    """Route every row with `orch`'s triage expert and score the categories it picks.

    Args:
        orch: The app; its own triage prompt, categories and model answer.
        rows: Labelled messages; a label must be one of the app's categories, `OTHER` or
            `HUMAN`.
        concurrency: Rows in flight at once.
        done: Outcomes of rows already scored (by index), which are not sent again.
        on_result: Called with each new outcome as it is scored.

    Raises:
        ConfigError: a row's label is not a category of the app, or `concurrency` < 1.
    """
    triage, _requests, _response = orch.experts
    known = set(triage.output_type.category_names)
    unknown = sorted({r.category for r in rows} - known)
    if unknown:
        raise ConfigError(
            f"the rows name categories the app does not have: {', '.join(unknown[:10])}"
            f"{' ...' if len(unknown) > 10 else ''} (it has: {', '.join(sorted(known))})"
        )

    router = orch.profile.router
    bound = None if router is None else Router.bind(router, None, orch.profile.categories)

    async def score(index: int, row: TriageRow) -> TriageOutcome:
        started = time.perf_counter()
        scored: RouterScore | None = None
        candidates: tuple[str, ...] = ()
        try:
            if bound is not None:  # The router first: a confident route makes no call.
                decision = await bound.decide(row.text)
                scored, candidates = RouterScore.of(decision), decision.candidates
                if decision.category is not None:
                    usage = Usage(seconds=time.perf_counter() - started)
                    return TriageOutcome(
                        index, row.category, decision.category, usage, None, scored
                    )
            asked = triage.for_message(row.text, candidates)
            result = await asked.run(_thread(row.text), metadata={"evaluation": "triage"})
        except Exception as e:
            usage = Usage(seconds=time.perf_counter() - started)
            error = f"{type(e).__name__}: {e}"
            return TriageOutcome(index, row.category, None, usage, error, scored)
        usage = _usage(result.response, time.perf_counter() - started)
        return TriageOutcome(index, row.category, result.category, usage, None, scored)

    outcomes = await _run_rows(rows, score, concurrency, done, on_result)
    report = triage_report(outcomes)
    if router is None:
        return report
    scored = [(o.expected, o.router) for o in outcomes if o.router is not None]
    figures = router_figures(
        scored, embedder=router.embedder.name, threshold=router.threshold, margin=router.margin
    )
    return dataclasses.replace(report, router=figures)


async def evaluate_extraction(
    orch: Orchestrator,
    category: str,
    rows: Sequence[ExtractionRow],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    done: Iterable[ExtractionOutcome] = (),
    on_result: Callable[[ExtractionOutcome], None] | None = None,
) -> ExtractionReport:
    """Extract every row with the request expert of `category` and score each field.

    A field counts as right when the extracted value equals the expected one after the
    request model's own validation (so `12` and `"12"` for a `Decimal` field are equal).

    Raises:
        ConfigError: `category` has no request model, or a row names a field it lacks.
    """
    _triage, requests, _response = orch.experts
    expert = requests.get(category)
    if expert is None or expert.category.request is None:
        raise ConfigError(
            f"category {category!r} has no request model to extract"
            f" (categories with one: {', '.join(sorted(requests)) or 'none'})"
        )
    model = expert.category.request
    expected_rows = [_expected(model, row, i) for i, row in enumerate(rows)]
    adapters = {name: field_adapter(info) for name, info in model.model_fields.items()}

    async def score(index: int, row: ExtractionRow) -> ExtractionOutcome:
        started = time.perf_counter()
        values = expected_rows[index]
        expected = {k: adapters[k].dump_python(v, mode="json") for k, v in values.items()}
        try:
            result = await expert.run(_thread(row.text), metadata={"evaluation": "extraction"})
        except Exception as e:
            usage = Usage(seconds=time.perf_counter() - started)
            return ExtractionOutcome(index, expected, {}, None, usage, f"{type(e).__name__}: {e}")
        usage = _usage(result.response, time.perf_counter() - started)
        predicted: dict[str, Any] = {}
        correct: list[str] = []
        if result.request is not None:
            dumped = result.request.model_dump(mode="json")
            predicted = {k: v for k, v in dumped.items() if v is not None}
            correct = [k for k, v in values.items() if getattr(result.request, k) == v]
        missing = None if result.need_more_info is None else list(result.need_more_info.missing)
        return ExtractionOutcome(index, expected, predicted, missing, usage, correct=correct)

    outcomes = await _run_rows(rows, score, concurrency, done, on_result)
    return extraction_report(category, list(model.model_fields), outcomes)


async def _run_rows(
    rows: Sequence[R],
    score: Callable[[int, R], Awaitable[Out]],
    concurrency: int,
    done: Iterable[Out],
    on_result: Callable[[Out], None] | None,
) -> list[Out]:
    if concurrency < 1:
        raise ConfigError(f"concurrency must be 1 or more, got {concurrency}")
    results: dict[int, Out] = {o.index: o for o in done if 0 <= o.index < len(rows)}
    todo = [i for i in range(len(rows)) if i not in results]
    gate = asyncio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with gate:
            outcome = await score(index, rows[index])
        results[index] = outcome
        if on_result is not None:
            on_result(outcome)

    async with asyncio.TaskGroup() as group:
        for index in todo:
            group.create_task(one(index))
    return [results[i] for i in range(len(rows))]


def triage_report(outcomes: Sequence[TriageOutcome]) -> TriageReport:
    """Score triage outcomes (also what a resumed run recomputes from its kept outcomes)."""
    n = len(outcomes)
    right = sum(o.predicted == o.expected for o in outcomes)
    labels = sorted({o.expected for o in outcomes} | {o.predicted or "" for o in outcomes} - {""})
    per_category = {}
    for label in labels:
        tp = sum(o.expected == label and o.predicted == label for o in outcomes)
        fp = sum(o.expected != label and o.predicted == label for o in outcomes)
        fn = sum(o.expected == label and o.predicted != label for o in outcomes)
        per_category[label] = _scores(tp, fp, fn)
    mistakes = Counter(
        (o.expected, o.predicted or "(failed)") for o in outcomes if o.predicted != o.expected
    )
    confusions = [
        {"expected": e, "predicted": p, "count": c}
        for (e, p), c in sorted(mistakes.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_CONFUSIONS]
    ]
    oos = [o for o in outcomes if o.expected == OTHER]
    return TriageReport(
        accuracy=right / n if n else 0.0,
        macro_f1=(sum(s.f1 for s in per_category.values()) / len(labels) if labels else 0.0),
        per_category=per_category,
        confusions=confusions,
        oos_recall=(sum(o.predicted == OTHER for o in oos) / len(oos)) if oos else None,
        in_scope_accuracy=(
            sum(o.predicted == o.expected for o in outcomes if o.expected != OTHER) / (n - len(oos))
            if oos and n > len(oos)
            else None
        ),
        errors=sum(o.error is not None for o in outcomes),
        costs=_costs([o.usage for o in outcomes]),
        outcomes=list(outcomes),
    )


def extraction_report(
    category: str, fields: Sequence[str], outcomes: Sequence[ExtractionOutcome]
) -> ExtractionReport:
    """Score extraction outcomes field by field (a wrong value is a false positive and a
    false negative, as slot F1 counts it)."""
    per_field: dict[str, Scores] = {}
    total = [0, 0, 0]
    for name in fields:
        tp = fp = fn = 0
        for o in outcomes:
            right = name in o.correct
            tp += right
            fp += name in o.predicted and not right
            fn += name in o.expected and not right
        if tp or fp or fn:
            per_field[name] = _scores(tp, fp, fn)
            total = [total[0] + tp, total[1] + fp, total[2] + fn]
    n = len(outcomes)
    exact = sum(
        o.error is None and set(o.expected) | set(o.predicted) <= set(o.correct) for o in outcomes
    )
    return ExtractionReport(
        category=category,
        micro_f1=_scores(*total).f1,
        exact_match=exact / n if n else 0.0,
        per_field=per_field,
        need_more_info_rate=(sum(o.need_more_info is not None for o in outcomes) / n if n else 0),
        errors=sum(o.error is not None for o in outcomes),
        costs=_costs([o.usage for o in outcomes]),
        outcomes=list(outcomes),
    )


def _expected(model: type[BaseModel], row: ExtractionRow, index: int) -> dict[str, Any]:
    """The row's expected fields as the request model validates them."""
    fields = model.model_fields
    unknown = sorted(set(row.expected) - set(fields))
    if unknown:
        raise ConfigError(
            f"row {index + 1} names {', '.join(unknown)}, which {model.__name__} does not have"
            f" (its fields: {', '.join(fields)})"
        )
    out: dict[str, Any] = {}
    for name, value in row.expected.items():
        if value is None:
            continue
        try:
            out[name] = expected_value(fields[name], value)
        except ValidationError as e:
            problem = e.errors()[0]["msg"] if e.errors() else str(e)
            raise ConfigError(
                f"row {index + 1}: {name}={value!r} is not a valid {model.__name__}.{name}:"
                f" {problem}"
            ) from e
    return out


def field_adapter(info: FieldInfo) -> TypeAdapter[Any]:
    """Validates one field's value as its model does (its type and constraints)."""
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[annotation, *info.metadata]
    return TypeAdapter(annotation)


def expected_value(info: FieldInfo, value: Any) -> Any:
    """An expected value as the field's model validates it; a number written for a text
    field (YAML's `last_four: 4242`) is read as its text, as a person meant it.

    Raises:
        ValidationError: the model refuses the value either way.
    """
    adapter = field_adapter(info)
    try:
        return adapter.validate_python(value)
    except ValidationError:
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return adapter.validate_python(str(value))
            except ValidationError:
                pass
        raise


def _thread(text: str) -> list[Message]:
    return [{"role": "user", "content": text}]


def _usage(response: ModelResponse, seconds: float) -> Usage:
    u = response.usage
    cost = cost_of(
        response.model,
        input_tokens=u.input_tokens,
        output_tokens=u.output_tokens,
        cache_read_tokens=u.cache_read_tokens,
        cache_write_tokens=u.cache_write_tokens,
    )
    return Usage(
        seconds=seconds,
        model_calls=max(response.attempts, 1),
        input_tokens=u.total_input_tokens,
        output_tokens=u.output_tokens,
        cost_usd=cost.usd,
        cost_known=cost.known,
    )


def _scores(tp: int, fp: int, fn: int) -> Scores:
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Scores(precision=precision, recall=recall, f1=f1, support=tp + fn)


def _costs(usages: Sequence[Usage]) -> Costs:
    n = len(usages)
    calls = sum(u.model_calls for u in usages)
    tokens_in = sum(u.input_tokens for u in usages)
    tokens_out = sum(u.output_tokens for u in usages)
    seconds = sorted(u.seconds for u in usages)
    return Costs(
        messages=n,
        model_calls=calls,
        tokens={
            "input": tokens_in,
            "output": tokens_out,
            "total": tokens_in + tokens_out,
            "per_message": (tokens_in + tokens_out) / n if n else 0.0,
        },
        model_calls_per_message=calls / n if n else 0.0,
        p50_s=_percentile(seconds, 0.50),
        p95_s=_percentile(seconds, 0.95),
        cost_per_1000_usd=1000 * sum(u.cost_usd for u in usages) / n if n else 0.0,
        cost_known=all(u.cost_known for u in usages),
    )


def _percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank percentile of sorted values (0 when there are none)."""
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def _costs_line(c: Costs) -> str:
    cost = f"${c.cost_per_1000_usd:.4f}" + ("" if c.cost_known else " (some prices unknown)")
    return (
        f"model calls {c.model_calls} ({c.model_calls_per_message:.2f}/message),"
        f" tokens {c.tokens['per_message']:.0f}/message, p50 {c.p50_s:.3f}s,"
        f" p95 {c.p95_s:.3f}s, cost per 1,000 messages {cost}"
    )


def outcome_from_json(kind: str, data: Mapping[str, Any]) -> TriageOutcome | ExtractionOutcome:
    """An outcome kept as JSON (by `dataclasses.asdict`) read back, for a resume."""
    usage = Usage(**data["usage"])
    if kind == "triage":
        router = data.get("router")
        return TriageOutcome(
            data["index"],
            data["expected"],
            data["predicted"],
            usage,
            data.get("error"),
            None if router is None else RouterScore(**router),
        )
    return ExtractionOutcome(
        data["index"],
        dict(data["expected"]),
        dict(data["predicted"]),
        data["need_more_info"],
        usage,
        data.get("error"),
        list(data.get("correct", [])),
    )
