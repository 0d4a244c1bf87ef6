"""`frontdesk test PATH...`: YAML conversation tests, scripted or against a model.

The engine is `frontdesk.devkit.conversation_tests`; this module is its command line: read
the files, build the app per run, print the report, write JUnit XML, exit 0 or 1.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from frontdesk.cli._options import MODEL_HELP, app_option, model_choice
from frontdesk.devkit.app import DEFAULT_APP, load_app
from frontdesk.devkit.conversation_tests import load_file, run_files, write_junit
from frontdesk.errors import UserError
from frontdesk.experts.providers import Model, model_from_spec
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.config import ModelChoice


def run_tests(
    paths: Annotated[
        list[Path], typer.Argument(help="YAML files of conversations (docs/testing.md).")
    ],
    app_spec: Annotated[
        str, app_option("module:function building your Orchestrator; it must take model=.")
    ] = DEFAULT_APP,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help=MODEL_HELP + " Or module:attr naming a Model. Evaluates it; without it the"
            " triage and request experts answer what the file expects.",
        ),
    ] = None,
    user: Annotated[
        str | None,
        typer.Option(
            "--user",
            help="The simulated customer of `simulate:` conversations: a model spec or"
            " module:attr naming a Model (default: the app's model map's \"user\").",
        ),
    ] = None,
    judge: Annotated[
        str | None,
        typer.Option(
            "--judge",
            help="The judge of `judge:` criteria: a model spec or module:attr naming a Model"
            " (default: the app's model map's \"judge\").",
        ),
    ] = None,
    repeat: Annotated[
        int, typer.Option("--repeat", min=1, help="Runs per conversation (pass^k).")
    ] = 1,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Write a JUnit XML report to this file.")
    ] = None,
) -> None:
    """Run conversation tests; exit 0 when every check passes, 1 when one does not."""
    files = [load_file(path) for path in paths]
    choice = model_choice(model)
    players = [_player(model_choice(spec)) for spec in (user, judge)]

    def build(choice: ModelChoice) -> Orchestrator:
        return load_app(app_spec, model=choice)

    with tempfile.TemporaryDirectory(prefix="frontdesk-test-") as workdir:
        report = asyncio.run(
            run_files(
                files,
                build,
                workdir=Path(workdir),
                model=choice,
                repeat=repeat,
                user=players[0],
                judge=players[1],
            )
        )
    typer.echo(report.text())
    if junit is not None:
        write_junit(report, junit)
        typer.echo(f"JUnit report: {junit}")
    raise typer.Exit(0 if report.passed else 1)


def _player(choice: ModelChoice) -> Model | None:
    """The `--user` / `--judge` model (a spec is resolved the way `--model`'s is)."""
    if choice is None or isinstance(choice, Model):
        return choice
    if isinstance(choice, str):
        return model_from_spec(choice)
    raise UserError("--user and --judge take one model spec or module:attr, not a map")
