"""`frontdesk eval triage DATA` and `frontdesk eval extract DATA`: score an app's routing and
extraction on labelled rows (the business's own CSV/JSONL, or a public data set).

The scoring is `frontdesk.eval` (`orchestrator/evaluation.py`), the files are read by
`orchestrator/datasets.py`; this module builds the app, shows a progress bar, keeps each
scored row in a state file so that a run stopped with Ctrl-C resumes where it stopped (the
same command again), and writes the text, `--json` and `--html` reports.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

from frontdesk.cli._options import MODEL_HELP, app_option, model_choice
from frontdesk.devkit.app import load_app
from frontdesk.errors import UserError
from frontdesk.experts.category import Category, HandlerContext, Outcome
from frontdesk.experts.providers import OfflineModel
from frontdesk.experts.router import DEFAULT_MARGIN, DEFAULT_THRESHOLD, EmbeddingRouter
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.datasets import load_extraction, load_triage
from frontdesk.orchestrator.evaluation import (
    DEFAULT_CONCURRENCY,
    ExtractionOutcome,
    ExtractionReport,
    TriageOutcome,
    TriageReport,
    evaluate_extraction,
    evaluate_triage,
    outcome_from_json,
)
from frontdesk.orchestrator.evaluation_html import extraction_html, triage_html
from frontdesk.threads.budget import DEFAULT_BUDGETS

app = typer.Typer(no_args_is_help=True)

DataArg = Annotated[
    str,
    typer.Argument(
        help="A .csv or .jsonl file of your own rows, or banking77:PATH, clinc150:PATH,"
        " nlupp:PATH (a public data set's folder).",
        metavar="DATA",
    ),
]
ModelArg = Annotated[
    str | None,
    typer.Option("--model", help=MODEL_HELP + " Or module:attr naming a Model."),
]
LimitArg = Annotated[
    int | None, typer.Option("--limit", min=1, help="Score this many rows (a fixed sample).")
]
JsonArg = Annotated[Path | None, typer.Option("--json", help="Write the report as JSON here.")]
HtmlArg = Annotated[
    Path | None, typer.Option("--html", help="Write a self-contained HTML report here.")
]
ConcurrencyArg = Annotated[
    int, typer.Option("--concurrency", min=1, help="Rows sent to the model at once.")
]

_TRIAGE_PROMPT_ROOM = 1_000_000
"""Tokens allowed for the triage prompt of an app built from a data set (150 categories with
10 examples each are far over the default allowance, and that is the point of the test)."""


@app.command("triage")
def triage(
    data: DataArg,
    app_spec: Annotated[
        str | None,
        app_option("module:attr of your Orchestrator; without it each label is a category."),
    ] = None,
    model: ModelArg = None,
    examples: Annotated[
        int, typer.Option("--examples", min=0, help="Training examples per label (no --app).")
    ] = 10,
    limit: LimitArg = None,
    json_file: JsonArg = None,
    html_file: HtmlArg = None,
    concurrency: ConcurrencyArg = DEFAULT_CONCURRENCY,
    router: Annotated[
        str | None,
        typer.Option(
            "--router",
            help="Route with an EmbeddingRouter first: 'minilm' or 'openai:NAME@URL' (no --app;"
            " an --app's own router is used as it is). Adds the routed share, its precision"
            " and the accuracy-coverage curve over thresholds.",
        ),
    ] = None,
    threshold: Annotated[
        float | None, typer.Option("--threshold", help="The router's threshold (--router).")
    ] = None,
    margin: Annotated[
        float | None, typer.Option("--margin", help="The router's margin (--router).")
    ] = None,
) -> None:
    """Route each row with the app's triage expert; accuracy, macro-F1, confusions, costs."""
    loaded = load_triage(data, examples=examples, limit=limit)
    choice = model_choice(model)
    if app_spec is not None:
        if router is not None:
            raise UserError("--router builds the router of a data set's app; an --app has its own")
        orch = load_app(app_spec, model=choice)
    else:
        orch = Orchestrator(
            loaded.categories,
            model=choice,
            audit=False,
            memory=False,
            knowledge=False,
            budgets={
                "triage": dataclasses.replace(DEFAULT_BUDGETS["triage"], system=_TRIAGE_PROMPT_ROOM)
            },
            router=None if router is None else _router(router, threshold, margin),
        )
    key: list[Any] = ["triage", data, app_spec, model, examples, limit]
    if router is not None:  # A run without a router keeps the key it always had.
        key += [router, threshold, margin]
    with _kept(key, "triage", len(loaded.rows)) as (done, keep, progress):

        def scored(outcome: TriageOutcome) -> None:
            keep(outcome)
            progress()

        report = _run(
            orch,
            evaluate_triage(
                orch,
                loaded.rows,
                concurrency=concurrency,
                done=[o for o in done if isinstance(o, TriageOutcome)],
                on_result=scored,
            ),
        )
    _write(report, data, model, json_file, html_file, {"examples": examples, "limit": limit})


def _router(spec: str, threshold: float | None, margin: float | None) -> EmbeddingRouter:
    """`--router` with the `--threshold` and `--margin` given (else the router's defaults)."""
    return EmbeddingRouter(
        spec,
        threshold=DEFAULT_THRESHOLD if threshold is None else threshold,
        margin=DEFAULT_MARGIN if margin is None else margin,
    )


@app.command("extract")
def extract(
    data: DataArg,
    app_spec: Annotated[
        str | None,
        app_option("module:attr of your Orchestrator (not needed for nlupp:PATH)."),
    ] = None,
    category: Annotated[
        str | None,
        typer.Option("--category", help="The category whose request is extracted."),
    ] = None,
    model: ModelArg = None,
    limit: LimitArg = None,
    json_file: JsonArg = None,
    html_file: HtmlArg = None,
    concurrency: ConcurrencyArg = DEFAULT_CONCURRENCY,
) -> None:
    """Extract each row with a category's request expert; per-field precision/recall/F1."""
    loaded = load_extraction(data, limit=limit)
    choice = model_choice(model)
    if choice == "offline" and loaded.reference_date is not None:
        # The set's relative dates ("tomorrow") were resolved against its own day.
        choice = OfflineModel(today=loaded.reference_date)
    name = category or loaded.category
    if app_spec is not None:
        orch = load_app(app_spec, model=choice)
    elif loaded.request is not None and name is not None:
        orch = Orchestrator(
            [
                Category(
                    name=name,
                    description=f"Requests of the {data.partition(':')[0]} data set.",
                    request=loaded.request,
                    handler=_not_run,
                    examples=[r.text for r in loaded.rows[:3]],
                )
            ],
            model=choice,
            audit=False,
            memory=False,
            knowledge=False,
        )
    else:
        raise UserError(f"{data}: pass --app module:attr and --category NAME to extract with")
    if name is None:
        raise UserError("pass --category NAME: the category whose request model is extracted")
    key = ["extract", data, app_spec, name, model, limit]
    with _kept(key, "extract", len(loaded.rows)) as (done, keep, progress):

        def scored(outcome: ExtractionOutcome) -> None:
            keep(outcome)
            progress()

        report = _run(
            orch,
            evaluate_extraction(
                orch,
                name,
                loaded.rows,
                concurrency=concurrency,
                done=[o for o in done if isinstance(o, ExtractionOutcome)],
                on_result=scored,
            ),
        )
    _write(report, data, model, json_file, html_file, {"limit": limit})


async def _not_run(request: Any, context: HandlerContext) -> Outcome:
    """The data set's category is only extracted; no turn runs its handler."""
    return Outcome(instruction="Acknowledge the request.")


def _run(orch: Orchestrator, work: Any) -> Any:
    async def go() -> Any:
        try:
            return await work
        finally:
            await orch.aclose()

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        typer.echo(
            "interrupted; the rows scored so far are kept: run the same command again to resume",
            err=True,
        )
        raise typer.Exit(130) from None


Keep = Callable[[Any], None]


def state_path(key: Sequence[Any]) -> Path:
    """Where a run with these arguments keeps its scored rows, in the working folder."""
    digest = hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:12]
    return Path(f".frontdesk-eval-{digest}.jsonl")


@contextmanager
def _kept(
    key: Sequence[Any], kind: str, total: int
) -> Iterator[tuple[list[TriageOutcome | ExtractionOutcome], Keep, Callable[[], None]]]:
    """The outcomes a stopped run kept (to skip), a function keeping each new one, and a
    progress bar; the state file is removed once the run completes."""
    state = state_path(key)
    done: list[TriageOutcome | ExtractionOutcome] = []
    if state.exists():
        for line in state.read_text(encoding="utf-8").splitlines():
            try:
                done.append(outcome_from_json(kind, json.loads(line)))
            except (ValueError, KeyError, TypeError):
                continue  # A line cut by the interruption: that row is scored again.
        typer.echo(f"resuming: {len(done)} of {total} rows already scored ({state})", err=True)
    console = Console(stderr=True)
    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    with state.open("a", encoding="utf-8") as out, bar:
        task = bar.add_task(kind, total=total, completed=len(done))

        def keep(outcome: Any) -> None:
            out.write(json.dumps(dataclasses.asdict(outcome)) + "\n")
            out.flush()

        yield done, keep, lambda: bar.advance(task)
    state.unlink(missing_ok=True)


def _write(
    report: TriageReport | ExtractionReport,
    data: str,
    model: str | None,
    json_file: Path | None,
    html_file: Path | None,
    settings: dict[str, Any],
) -> None:
    typer.echo(report.text())
    title = f"frontdesk eval: {data}" + (f" with {model}" if model else "")
    if json_file is not None:
        document = {"data": data, "model": model, **settings, **report.to_json()}
        json_file.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        typer.echo(f"JSON report: {json_file}")
    if html_file is not None:
        page = (
            triage_html(report, title=title)
            if isinstance(report, TriageReport)
            else extraction_html(report, title=title)
        )
        html_file.write_text(page, encoding="utf-8")
        typer.echo(f"HTML report: {html_file}")
