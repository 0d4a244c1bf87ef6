"""The options every command group shares (`--db`, `--app`, `--json`), declared once here,
the helpers that read them, and the tables every command prints.

A command whose default differs says so in its own help text (`demo --db`, each `--app`),
so each option is a function of its help; the flag's name and type are written only here.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import shlex
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from sqlalchemy.engine import make_url

from frontdesk.devkit.app import default_db
from frontdesk.errors import ConfigError, UserError
from frontdesk.experts.providers import Model
from frontdesk.orchestrator.config import ModelChoice

DB_HELP = "Database URL (default: $FRONTDESK_DB or sqlite:///frontdesk.db)."
JSON_HELP = "One JSON document on stdout."
MODEL_HELP = "Model spec, e.g. offline, anthropic:claude-sonnet-4-5."


def db_option(help: str = DB_HELP) -> Any:
    """`--db URL`: the database (None means `default_db()`, unless the command says else)."""
    return typer.Option("--db", help=help)


def app_option(help: str) -> Any:
    """`--app module:attr`: the Orchestrator (or a function returning one) to load."""
    return typer.Option("--app", help=help)


def json_option(help: str = JSON_HELP) -> Any:
    """`--json`: print one JSON document on stdout instead of tables."""
    return typer.Option("--json", help=help)


def model_option(help: str = MODEL_HELP) -> Any:
    """`--model SPEC`: the model every expert uses (None: the app's, or the environment's)."""
    return typer.Option("--model", help=help)


RetentionOption = Annotated[
    str | None,
    typer.Option(
        "--retention",
        help="Shred audit payloads older than this age (90d, 12w, 6m) as an hourly periodic"
        " job, instead of cron (docs/privacy.md).",
    ),
]
RetentionTranscriptsOption = Annotated[
    bool,
    typer.Option(
        "--retention-transcripts", help="With --retention: erase old transcript messages too."
    ),
]
DbOption = Annotated[str | None, db_option()]
JsonOption = Annotated[bool, json_option()]
ModelOption = Annotated[str | None, model_option()]


def model_choice(spec: str | None) -> ModelChoice:
    """What `--model` names: a model spec (`offline`, `anthropic:NAME`, ...), or
    `module:attr` naming a `Model` (a test double of the developer's own) or a function
    returning one; `None` leaves the app's or the environment's models.

    Raises:
        ConfigError: `module:attr` cannot be imported or is not a Model.
    """
    if spec is None:
        return None
    module_name, sep, attr = spec.partition(":")
    if not sep or module_name.lower() in ("anthropic", "openai", "offline") or "." in attr:
        return spec
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return spec  # Not a module: the spec's own check names the valid forms.
    target = getattr(module, attr, None)
    if callable(target) and not isinstance(target, Model):
        target = target()
    if not isinstance(target, Model):
        raise ConfigError(
            f"--model {spec!r}: {module_name}.{attr} is not a Model (an object with `name` and"
            " `async request(ModelRequest)`), nor a function returning one"
        )
    return target


def db_url(db: str | None) -> str:
    """The database URL `--db` names, or the default one."""
    return db or default_db()


def existing_db(db: str | None) -> str:
    """The database URL; a SQLite file that does not exist is an error, not a new database.

    Raises:
        UserError: the SQLite file is missing.
    """
    url = db_url(db)
    parsed = make_url(url)
    if parsed.drivername.startswith("sqlite") and parsed.database:
        if not Path(parsed.database).exists():
            raise UserError(f"no database at {parsed.database}; pass --db URL or set FRONTDESK_DB")
    return url


def invocation() -> str:
    """How to run this `frontdesk` again, as printed for a person to paste: `frontdesk` when
    that is on PATH and is this one; else this environment's console script (relative to
    the working folder when inside it: `.venv/bin/frontdesk` after `make demo`), else
    `python -m frontdesk` with this interpreter."""
    script = Path(sys.executable).parent / "frontdesk"
    found = shutil.which("frontdesk")
    if found and script.exists() and Path(found).resolve() == script.resolve():
        return "frontdesk"
    if script.exists():
        try:
            return str(script.absolute().relative_to(Path.cwd()))
        except ValueError:
            return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m frontdesk"


def emit_json(value: Any) -> None:
    """Print `value` as JSON on stdout (dataclasses as objects, sets as sorted lists)."""

    def default(o: Any) -> Any:
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
        if isinstance(o, set | frozenset):
            return sorted(o)
        return str(o)

    typer.echo(json.dumps(value, default=default, ensure_ascii=False, indent=2))


def id_column(table: Table, name: str, values: Iterable[str]) -> None:
    """Add a column of ids (memory ids, conversation and user ids) that is never cut: it is
    as wide as its longest value, the other columns give way, and on a terminal too narrow
    even for that an id folds onto the next line instead of ending in an ellipsis."""
    longest = max((len(v) for v in values), default=len(name))
    table.add_column(name, no_wrap=True, overflow="fold", min_width=max(longest, len(name)))


def print_table(table: Table, console: Console | None = None) -> None:
    """Print a table; piped into a file or another program, every value in full.

    On a terminal rich fits the table to its width (wrapping text columns); when stdout is
    not a terminal there is no width to fit, so the table is printed as wide as its values
    need, for the next command (`memory forget ID`) or a script to read.
    """
    console = console or Console()
    if not console.is_terminal:
        wide = Console(width=100_000, file=console.file, color_system=None)
        needed = Measurement.get(wide, wide.options, table).maximum
        console = Console(width=max(console.width, needed), file=console.file, color_system=None)
    console.print(table)
