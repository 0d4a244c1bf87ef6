"""`frontdesk report`: did it help, for a period (resolution, containment, hand-offs,
ratings, turns, failures and cost per resolution), per category and per day."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from frontdesk.audit.store import AuditLog
from frontdesk.cli._options import DbOption, existing_db, print_table
from frontdesk.errors import UserError
from frontdesk.orchestrator.report import Report, build_report, render_html
from frontdesk.threads.report import PAGE
from frontdesk.threads.store import ConversationStore


def _when(option: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as e:
        raise UserError(
            f"{option} {value!r}: expected an ISO date or time, e.g. 2026-03-01 or"
            " 2026-03-01T09:30+00:00"
        ) from e
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


async def _build(
    url: str,
    since: datetime | None,
    until: datetime | None,
    profile: str | None,
    by_variant: bool,
    audit_url: str,
) -> Report:
    store = await ConversationStore.open(url)
    # The log the summariser's and memory expert's calls are in (their usage is in clear).
    audit = await AuditLog.open(audit_url)
    try:
        with Progress(console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task("reading conversations", total=None)

            def progress(done: int, total: int) -> None:
                if total > PAGE:  # A bar only where there is something to wait for.
                    bar.update(task, completed=done, total=total)

            return await build_report(
                store,
                since=since,
                until=until,
                profile=profile,
                by_variant=by_variant,
                progress=progress,
                audit=audit,
            )
    finally:
        await audit.aclose()
        await store.aclose()


def report(
    since: Annotated[
        str | None,
        typer.Option("--since", help="Conversations begun at or after (ISO date or time, UTC)."),
    ] = None,
    until: Annotated[
        str | None, typer.Option("--until", help="Conversations begun before (ISO, UTC).")
    ] = None,
    json_file: Annotated[
        Path | None, typer.Option("--json", help="Write the whole report as JSON to FILE.")
    ] = None,
    html_file: Annotated[
        Path | None,
        typer.Option("--html", help="Write the report as an HTML page with charts to FILE."),
    ] = None,
    profile: Annotated[
        str | None, typer.Option("--profile", help="Only the conversations of this profile.")
    ] = None,
    by: Annotated[
        str | None,
        typer.Option("--by", help="Also group by `variant` (prompt variants compared)."),
    ] = None,
    db: DbOption = None,
    audit_db: Annotated[
        str | None,
        typer.Option(
            "--audit-db",
            help="The audit log's database when it is not the conversations' (--db): the"
            " summariser's and memory expert's costs are read from it.",
        ),
    ] = None,
) -> None:
    """Did it help: resolution, containment, hand-offs, ratings and cost per resolution."""
    if by not in (None, "variant"):
        raise UserError(f"--by {by!r}: the only grouping besides category and day is 'variant'")
    start, end = _when("--since", since), _when("--until", until)
    if start is not None and end is not None and end <= start:
        raise UserError(f"--until {until} is not after --since {since}")
    url = existing_db(db)
    audit_url = url if audit_db is None else existing_db(audit_db)
    built = asyncio.run(_build(url, start, end, profile, by == "variant", audit_url))
    doc = built.as_json()
    if json_file is not None:
        json_file.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    if html_file is not None:
        html_file.write_text(render_html(built))
    _print(doc, by_variant=by == "variant")


def _print(doc: dict[str, Any], *, by_variant: bool) -> None:
    groups = [("category", doc["by_category"])]
    if by_variant:
        groups.append(("variant", doc["by_variant"]))
    for name, lines in groups:
        table = Table(title=f"per {name}")
        table.add_column(name)
        for column in (
            "conversations",
            "resolved",
            "containment",
            "hand-offs",
            "rating",
            "turns/conv.",
            "failed",
            "cost/resolution",
        ):
            table.add_column(column, justify="right")
        for line in [*lines, doc["total"]]:
            table.add_row(*_cells(line))
        print_table(table)
    if by_variant:
        for c in doc["variant_comparison"]:
            p = "-" if c["p_value"] is None else f"{c['p_value']:.4f}"
            typer.echo(
                f"{c['a']} {c['a_resolved']}/{c['a_conversations']} vs {c['b']}"
                f" {c['b_resolved']}/{c['b_conversations']} resolved: p = {p}"
            )


def _cells(line: dict[str, Any]) -> list[str]:
    def pct(key: str) -> str:
        value = line[key]
        return "-" if value is None else f"{float(value) * 100:.1f} %"

    def num(key: str, fmt: str) -> str:
        value = line[key]
        return "-" if value is None else format(value, fmt)

    return [
        str(line["label"]),
        str(line["conversations"]),
        pct("resolution_rate"),
        pct("containment"),
        pct("handoff_rate"),
        num("average_rating", ".2f"),
        num("turns_per_conversation", ".1f"),
        str(line["failed_turns"]),
        num("cost_per_resolution", ".4f"),
    ]
