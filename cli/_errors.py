"""The one error handler of every `frontdesk` command, and where the CLI's logs go.

Every command runs inside `FrontdeskGroup.invoke`, so a failure is handled once here rather
than in a copy per command: a frontdesk error, or a database or OS error the command did not
expect, prints one line `error: <what> (<what to do>)` on stderr and exits 2. `--traceback`
or `FRONTDESK_DEBUG=1` re-raises it instead, for a bug report. Ctrl-C exits 130 at once.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
from pathlib import Path
from typing import Any

import structlog
import typer
from rich.console import Console
from rich.markup import escape
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from typer.core import TyperGroup

from frontdesk.errors import ConfigProblems, FrontdeskError, StoreError, UserError

EXIT_ERROR = 2
"""A command that could not run: bad configuration, a dead database, an unknown id."""
EXIT_INTERRUPTED = 130
"""Ctrl-C, as a shell reports SIGINT."""

TRACEBACK_KEY = "frontdesk_traceback"


def debug_wanted(ctx: typer.Context | None = None) -> bool:
    """Whether a failure should show its traceback (`--traceback` or `FRONTDESK_DEBUG=1`)."""
    if os.environ.get("FRONTDESK_DEBUG", "").strip() not in ("", "0"):
        return True
    root = ctx.find_root() if ctx is not None else None
    return bool(root is not None and root.meta.get(TRACEBACK_KEY))


DB_HINT = "check --db or $FRONTDESK_DB: the server must be up, the file a frontdesk database"

_NOISE = re.compile(r"\(Background on this error at: [^)]*\)|\((?:sqlite3|asyncpg)\.[\w.]+\) ")


def describe(error: BaseException) -> str:
    """One line saying what failed and, where the message does not, what to do."""
    hint = ""
    if isinstance(error, DBAPIError):
        # The driver's own message, without SQLAlchemy's statement dump and background link.
        text = f"the database failed: {error.orig}"
        hint = DB_HINT
    elif isinstance(error, (SQLAlchemyError, StoreError)):
        text, hint = str(error), DB_HINT
    elif isinstance(error, (ConnectionError, TimeoutError, socket.gaierror)):
        text, hint = f"cannot reach the database: {error}", DB_HINT
    else:
        text = str(error) or type(error).__name__
    text = " ".join(_NOISE.sub("", text).split())
    return f"{text} ({hint})" if hint and not isinstance(error, UserError) else text


def print_error(error: BaseException) -> None:
    """`error: ...` on stderr, one logical line (one per problem of a `ConfigProblems`)."""
    console = Console(stderr=True, soft_wrap=True)
    lines = error.problems if isinstance(error, ConfigProblems) else (describe(error),)
    for line in lines:
        console.print(f"[red]error:[/red] {escape(line)}")


HANDLED: tuple[type[BaseException], ...] = (FrontdeskError, SQLAlchemyError, OSError)
"""What becomes `error: ...` and exit 2; anything else is a bug and keeps its traceback."""


class FrontdeskGroup(TyperGroup):
    """The root command group: runs every command inside the one error handler."""

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        """Run the command; translate what it raises into a message and an exit code."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            # The command's own `finally` blocks have run; leave without a traceback.
            print("", file=sys.stderr)
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except HANDLED as e:
            if isinstance(e, BrokenPipeError) or debug_wanted(ctx):
                raise
            print_error(e)
            raise typer.Exit(EXIT_ERROR) from e


class _StderrLoggerFactory:
    """Print loggers on whatever `sys.stderr` is when a line is logged (not at configure
    time: a test runner swaps and closes the stream between commands)."""

    def __call__(self, *args: Any) -> structlog.PrintLogger:
        return structlog.PrintLogger(sys.stderr)


def keep_logging_config(ctx: typer.Context) -> None:
    """Put structlog's configuration back as it was when the command ends (the CLI may run
    inside another program, or a test)."""
    saved = structlog.get_config()
    ctx.call_on_close(lambda: structlog.configure(**saved))


def _configure(factory: Any, level: int) -> None:
    structlog.configure(
        logger_factory=factory,
        wrapper_class=structlog.make_filtering_bound_logger(level),
        cache_logger_on_first_use=False,
    )


def configure_logging(ctx: typer.Context | None = None, *, path: Path | None = None) -> None:
    """Send structlog's lines to stderr, or append them to the file at `path`.

    stdout belongs to the command's output (a chat, a JSON document); log lines never go
    there.
    """
    if path is None:
        _configure(_StderrLoggerFactory(), logging.DEBUG)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    stream = path.open("a", encoding="utf-8")
    if ctx is not None:
        ctx.call_on_close(stream.close)
    _configure(structlog.PrintLoggerFactory(stream), logging.DEBUG)


def silence_logging() -> None:
    """Drop every structlog line below CRITICAL (a chat without `--verbose` or `--log-file`)."""
    _configure(_StderrLoggerFactory(), logging.CRITICAL)
