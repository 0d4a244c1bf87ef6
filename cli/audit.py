"""`frontdesk audit ...`: show, export, verify, cost and replay the audit log.

The commands read the audit rows only (`audit` package); `replay` alone needs the
application (`--app`) because it re-runs the experts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import hashlib
import json
import os
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import sqlalchemy as sa
import typer
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.progress import Progress
from rich.table import Table
from rich.text import Text

from frontdesk.audit.chain import Head
from frontdesk.audit.cost import CostLine, CostReport, cost_report
from frontdesk.audit.events import AuditEvent
from frontdesk.audit.export import IndexEntry, render_html, render_index, write_jsonl
from frontdesk.audit.redaction import recorded_rules, redact_rows, ruled_values
from frontdesk.audit.replay import (
    ReplayReport,
    TurnDiff,
    handoff_turns,
    missing_categories,
    recorded_app,
    replay_transcript,
)
from frontdesk.audit.store import AuditLog
from frontdesk.audit.transcript import ExpertCall, Transcript, TurnView, build_transcript
from frontdesk.cli._options import (
    DbOption,
    JsonOption,
    app_option,
    emit_json,
    existing_db,
    id_column,
    print_table,
)
from frontdesk.devkit.app import DEFAULT_APP, load_app
from frontdesk.devkit.replay import ReplayRunner, build_runner, parse_models
from frontdesk.errors import ConfigError, ReplayAppMismatch, UnknownConversation, UserError
from frontdesk.experts.category import HUMAN, OTHER
from frontdesk.orchestrator import Orchestrator
from frontdesk.redaction import RedactionPolicy, Redactor, Rule
from frontdesk.ruled import RuledValues, ruled_key
from frontdesk.threads.answered import answered_turns
from frontdesk.threads.listing import list_conversations
from frontdesk.threads.ruled_values import ruled_values_of

app = typer.Typer(help="audit commands", no_args_is_help=True)

T = TypeVar("T")

ConvArg = Annotated[str | None, typer.Argument(help="The conversation id.", show_default=False)]
AllOption = Annotated[bool, typer.Option("--all", help="Every conversation in the log.")]
ProfileOption = Annotated[
    str | None, typer.Option("--profile", help="Only the conversations of this profile.")
]

BUILT_IN = {HUMAN, OTHER}
"""The categories every app has (small talk, a person): never a sign of the wrong app."""


def _run(work: Callable[[AuditLog], Awaitable[T]], db: str | None) -> T:
    """Open the log, run `work`, close (failures go to the CLI's one error handler)."""

    async def main() -> T:
        # No master-key warning here: these commands read the log, and what they show is
        # the same with or without one (`serve` refuses to start without it, `erase` says
        # what stays readable).
        log = await AuditLog.open(existing_db(db))
        try:
            return await work(log)
        finally:
            await log.aclose()

    return asyncio.run(main())


async def _targets(
    log: AuditLog, conversation: str | None, every: bool, profile: str | None = None
) -> list[str]:
    """The conversations a command works on (one, or all with `--all`; with `--profile`,
    only those the profile answers)."""
    if conversation is not None and every:
        raise UserError("give a conversation id or --all, not both")
    if conversation is None:
        if not every:
            raise UserError("give a conversation id, or --all for every conversation")
        ids = await log.conversations()
    else:
        await _known(log, conversation)
        ids = [conversation]
    if profile is None:
        return ids
    try:
        rows = await list_conversations(log.engine, profile=profile, limit=1_000_000)
    except Exception as e:  # The log's database holds no conversations.
        raise UserError(
            "--profile reads the conversations' profiles: give the database that holds them"
        ) from e
    theirs = {r.conversation_id for r in rows}
    return [cid for cid in ids if cid in theirs]


async def _known(log: AuditLog, conversation: str) -> None:
    """Raise `UnknownConversation` unless the log holds rows for `conversation`."""
    known = await log.conversations()
    if conversation not in known:
        raise UnknownConversation(
            f"no audit rows for conversation {conversation!r} ({len(known)} conversations in"
            " this log; `frontdesk conversations` lists them)"
        )


async def conversation_transcripts(
    log: AuditLog, ids: list[str], redactor: Redactor | None = None, *, decrypt: bool = True
) -> list[Transcript]:
    """The conversations' transcripts; redacted ones when `redactor` is given."""
    out = []
    for cid in ids:
        rows = await log.events(cid, decrypt=decrypt)
        if redactor is not None:
            rows = redact_rows(rows, redactor, ruled=await kept_values(log, cid, redactor))
        if not rows:
            known = len(await log.conversations())
            raise UnknownConversation(
                f"no audit rows for conversation {cid!r} ({known} conversations in this log;"
                " `frontdesk conversations` lists them)"
            )
        out.append(build_transcript(cid, rows))
    return out


# -- redaction ----------------------------------------------------------------------------


async def kept_values(log: AuditLog, cid: str, redactor: Redactor | None) -> RuledValues | None:
    """The ruled values (`Redact`) kept for the conversation's owner from every conversation
    of theirs, found again in this one's rows; `None` with `--reveal`, or for an audit log
    kept apart from the conversations (no `ruled_value` table beside it)."""
    if redactor is None:
        return None
    try:
        rows = await ruled_values_of(log.engine, conversation_id=cid)
    except sa.exc.DBAPIError:
        return None
    user = rows[0].user if rows else ""
    return RuledValues(ruled_key(redactor.policy.secret), user, rows)


POLICY_ENV = "FRONTDESK_REDACTION_POLICY"
"""A JSON file holding the redaction policy of `audit show` and `audit export`."""

RevealOption = Annotated[
    bool,
    typer.Option(
        "--reveal",
        help="Show personal data in clear (default: cards, IBANs, emails, phones, bank"
        " details and ruled request fields are redacted).",
    ),
]
RedactionOption = Annotated[
    Path | None,
    typer.Option(
        "--redaction",
        help=f"A JSON redaction policy (default: ${POLICY_ENV}, else every built-in detector).",
        show_default=False,
    ),
]


async def audit_reveal(log: AuditLog, ids: list[str], view: str) -> None:
    """Record in each conversation's chain that `view` showed it with `--reveal` (who, from
    the OS user; no content, in clear)."""
    by = getpass.getuser()
    for cid in ids:
        event = AuditEvent(kind="revealed", turn_id="revealed", payload={"view": view, "by": by})
        await log.append(cid, [event], in_clear=True)


def redactor_for(reveal: bool, policy: Path | None) -> Redactor | None:
    """The redactor a clear-text view applies (`None` with `--reveal`)."""
    if reveal:
        return None
    path = policy if policy is not None else os.environ.get(POLICY_ENV) or None
    return Redactor(RedactionPolicy.from_file(path) if path else None)


# -- show ---------------------------------------------------------------------------------


def _call_line(call: ExpertCall) -> str:
    t = call.tokens
    status = "ok" if call.ok else f"[red]{escape(str(call.attempts[-1].error))}[/red]"
    unknown = "" if call.cost.known else " [yellow](price unknown)[/yellow]"
    speculative = ""
    if call.speculation == "discarded":  # Its answer, or its error, was never used.
        speculative = " [dim](speculative, discarded: answer not used)[/dim]"
    elif call.speculation == "kept":
        speculative = " [dim](speculative, kept)[/dim]"
    return (
        f"[bold]{call.expert}[/bold]{speculative} {escape(call.model)}{unknown}"
        f" · {len(call.attempts)}"
        f" attempt(s) · {t.input} in / {t.output} out / {t.cache_read} cache read /"
        f" {t.cache_write} cache write · ${call.cost.usd:.6f} · {call.latency_ms:.0f} ms · {status}"
    )


def _documents(call: ExpertCall) -> list[Text]:
    """The passages the call was sent (those of its last attempt), one line each."""
    sent = call.attempts[-1].documents if call.attempts else []
    return [
        Text(
            f"    document {d.get('source')} - {d.get('title')} v{d.get('version')}"
            f" (id {d.get('id')}, sha256 {str(d.get('sha256'))[:12]})",
            style="dim",
        )
        for d in sent
    ]


def _full_call(call: ExpertCall) -> list[Any]:
    parts: list[Any] = []
    for a in call.attempts:
        parts.append(
            Text(
                f"  attempt {a.number}: status {a.status_code}, {a.error or 'ok'}"
                f", request id {a.provider_request_id or '-'}",
                style="dim",
            )
        )
        if a.system_prompt is not None:
            name = f"{a.prompt.get('name')} v{a.prompt.get('version')}" if a.prompt else ""
            parts.append(
                Panel(
                    Text(a.system_prompt),
                    title=f"system prompt {name}",
                    title_align="left",
                    border_style="dim",
                )
            )
        parts.append(
            Panel(
                Text(json.dumps(a.messages, indent=2, ensure_ascii=False)),
                title="messages sent",
                title_align="left",
                border_style="dim",
            )
        )
        raw = a.response_body if a.response_body is not None else a.output
        raw_text = raw if isinstance(raw, str) else json.dumps(raw, indent=2, ensure_ascii=False)
        parts.append(
            Panel(Text(raw_text), title="raw response", title_align="left", border_style="dim")
        )
    return parts


def _developer_rows(table: Table, turn: TurnView) -> None:
    """What a category's developer looks for: the handler's traceback, and the speculative
    guess the turn threw away (its answer, or error, was never used)."""
    if turn.handler_traceback:
        table.add_row("traceback", Text(turn.handler_traceback.rstrip(), style="red"))
    for line in turn.events:
        if line.startswith("speculat"):
            table.add_row("speculation", Text(line.removeprefix("speculation: "), style="dim"))


def turn_panel(number: int, turn: TurnView, *, full: bool) -> Panel:
    """One turn: what the user said, the decisions, each expert call, the reply."""
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    if turn.user_text is not None or turn.started:
        table.add_row("user", Text(turn.user_text or "-"))
    if turn.held:
        table.add_row("hand-off", Text("kept for a person (no model call)", style="yellow"))
    elif turn.started or turn.calls:
        table.add_row("category", Text(f"{turn.category or '-'}  ({turn.reason or ''})"))
    if turn.request is not None:
        remembered = turn.request_from_memory
        note = f"  (from memory: {', '.join(remembered)})" if remembered else ""
        table.add_row("request", Text(json.dumps(turn.request, ensure_ascii=False) + note))
    if turn.need_more_info:
        table.add_row("need more", Text(json.dumps(turn.need_more_info, ensure_ascii=False)))
    for label, value in (
        ("request err", turn.request_error),
        ("instruction", turn.instruction),
        ("handler err", turn.handler_error),
    ):
        if value:
            table.add_row(label, Text(value))
    _developer_rows(table, turn)
    if turn.waiting_text is not None:
        table.add_row("waiting", Text(turn.waiting_text, style="dim"))
    label = "reply" if turn.author == "bot" else turn.author
    style = "green" if turn.author == "bot" else "bold yellow"
    table.add_row(label, Text(turn.reply_text or "-", style=style))
    if turn.failure:
        table.add_row(
            "failed", Text(f"{turn.failure.get('stage')}: {turn.failure.get('error')}", style="red")
        )
    for line in turn.handoff_events:
        table.add_row("hand-off", Text(line, style="magenta"))
    parts: list[Any] = [table]
    for call in turn.calls:
        parts.append(Text.from_markup("  " + _call_line(call)))
        parts.extend(_documents(call))
        if full:
            parts.extend(_full_call(call))
    title = f"turn {number} · {turn.tokens.total} tokens · ${turn.cost.usd:.6f}"
    return Panel(Group(*parts), title=title, title_align="left")


@app.command("show")
def show(
    conversation: Annotated[str, typer.Argument(help="The conversation id.")],
    full: Annotated[
        bool, typer.Option("--full", help="Show system prompts, messages sent and raw responses.")
    ] = False,
    all_branches: Annotated[
        bool,
        typer.Option(
            "--all-branches", help="Also show turns off the active path (edits, regenerations)."
        ),
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
    reveal: RevealOption = False,
    redaction: RedactionOption = None,
) -> None:
    """A readable transcript of the active path, with each turn's decisions and calls.

    Personal data is redacted unless `--reveal` is given (see docs/privacy.md).
    """
    redactor = redactor_for(reveal, redaction)

    async def work(log: AuditLog) -> Transcript:
        shown = (await conversation_transcripts(log, [conversation], redactor))[0]
        if redactor is None:
            await audit_reveal(log, [conversation], "audit show")
        return shown

    transcript = _run(work, db)
    console = Console()
    turns = transcript.turns if all_branches else transcript.active
    if as_json:
        emit_json(
            {
                "conversation_id": conversation,
                "turns": [
                    {**dataclasses.asdict(t), "tokens": t.tokens, "cost": t.cost,
                     "wall_ms": t.wall_ms, "on_active_path": t in transcript.active}
                    for t in turns
                ],
                "compactions": transcript.compactions,
            }
        )  # fmt: skip
        return
    console.print(
        f"conversation [bold]{escape(conversation)}[/bold]: {len(transcript.active)}"
        f" turn(s) on the active path, {len(transcript.turns)} recorded"
        + (" [dim](personal data redacted; --reveal shows it)[/dim]" if redactor else "")
    )
    for n, turn in enumerate(turns, start=1):
        console.print(turn_panel(n, turn, full=full))
    for compaction in transcript.compactions:
        console.print(
            f"[magenta]compaction[/magenta] after message …{compaction.turn_id[-8:]}:"
            f" {compaction.tokens.total} tokens, ${compaction.cost.usd:.6f} (not a turn)"
        )


# -- export -------------------------------------------------------------------------------


@app.command("export")
def export(
    out: Annotated[
        Path,
        typer.Option(
            "-o",
            "--output",
            help="File to write; with --all --format html, a folder (a page per conversation"
            " and index.html) unless it ends in .html (one page).",
        ),
    ],
    conversation: ConvArg = None,
    every: AllOption = False,
    profile: ProfileOption = None,
    fmt: Annotated[
        Literal["jsonl", "html"],
        typer.Option("--format", help="jsonl: one row per event; html: one self-contained page."),
    ] = "jsonl",
    db: DbOption = None,
    reveal: RevealOption = False,
    redaction: RedactionOption = None,
) -> None:
    """Export conversations as JSONL (one row per event, with hashes) or one HTML page.

    Personal data is redacted unless `--reveal` is given; redacted JSONL rows say
    `"redacted": true` (their payload is not the one the stored hash covers).
    """
    redactor = redactor_for(reveal, redaction)
    to_folder = fmt == "html" and every and out.suffix.lower() != ".html"
    if to_folder:
        out.mkdir(parents=True, exist_ok=True)

    async def work(log: AuditLog) -> int:
        ids = await _targets(log, conversation, every, profile)
        try:
            return await write(log, ids)
        finally:
            if redactor is None:
                await audit_reveal(log, ids, "audit export")

    async def write(log: AuditLog, ids: list[str]) -> int:
        if to_folder:
            return await export_folder(log, ids, out, redactor)
        if fmt == "html":
            transcripts = await conversation_transcripts(log, ids, redactor)
            title = f"frontdesk audit: {ids[0]}" if len(ids) == 1 else "frontdesk audit"
            page = render_html(transcripts, title=title, redacted=redactor is not None)
            out.write_text(page, encoding="utf-8")
            return sum(len(t.turns) for t in transcripts)
        n = 0
        with out.open("w", encoding="utf-8") as f:
            for cid in ids:
                ruled = await kept_values(log, cid, redactor)
                n += write_jsonl(await log.events(cid), f, redactor=redactor, ruled=ruled)
        return n

    n = _run(work, db)
    unit = "turns" if fmt == "html" else "events"
    where = out / "index.html" if out.is_dir() and fmt == "html" else out
    Console(soft_wrap=True).print(f"wrote {n} {unit} to {where}")


def page_name(conversation_id: str) -> str:
    """A conversation's file name in an exported folder: its id, percent-encoded (so any id
    is a safe name), shortened with a hash when long."""
    name = urllib.parse.quote(conversation_id, safe="-_.")
    if len(name) > 120:
        name = name[:100] + "-" + hashlib.sha256(conversation_id.encode()).hexdigest()[:16]
    return name + ".html"


async def export_folder(
    log: AuditLog, ids: list[str], folder: Path, redactor: Redactor | None
) -> int:
    """A page per conversation and `index.html` linking them all, each with its turn count,
    cost and whether its chain verifies; returns the turns written (`folder` exists)."""
    entries, turns = [], 0
    for cid in ids:
        [transcript] = await conversation_transcripts(log, [cid], redactor)
        name = page_name(cid)
        page = render_html(
            [transcript], title=f"frontdesk audit: {cid}", redacted=redactor is not None
        )
        (folder / name).write_text(page, encoding="utf-8")
        [verdict] = (await log.verify(cid)).conversations
        problem = None if verdict.problem is None else verdict.problem.detail
        entries.append(
            IndexEntry(
                cid,
                urllib.parse.quote(name),
                len(transcript.turns),
                transcript.cost.usd,
                transcript.cost.known,
                verdict.ok,
                problem,
            )
        )
        turns += len(transcript.turns)
    index = render_index(entries, redacted=redactor is not None)
    (folder / "index.html").write_text(index, encoding="utf-8")
    return turns


# -- verify and anchor --------------------------------------------------------------------


def _read_anchors(path: Path) -> dict[str, Head]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {cid: Head(int(h["seq"]), str(h["hash"])) for cid, h in data.items()}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(
            f"cannot read anchors from {path}: {e}; write them with"
            " `frontdesk audit anchor -o FILE`"
        ) from e


@app.command("verify")
def verify(
    conversation: ConvArg = None,
    every: AllOption = False,
    anchors: Annotated[
        Path | None,
        typer.Option(
            "--anchors",
            help="Heads saved earlier by `frontdesk audit anchor`; catches a truncated tail.",
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Check the hash chains; exit 1 naming the first bad row of each broken conversation.

    When the database also holds the conversations, a conversation with more answered
    turns than audited replies fails too (`unaudited`): a log emptied wholesale still
    chains. A tail cut off together with its head needs `--anchors` (see `anchor`).
    """

    async def work(log: AuditLog) -> tuple[Any, bool]:
        saved = _read_anchors(anchors) if anchors else None
        target = None if conversation is None else conversation
        if conversation is not None and every:
            raise UserError("give a conversation id or --all, not both")
        answered = await answered_turns(log.engine)
        if conversation is not None and conversation not in (answered or {}):
            await _known(log, conversation)  # In neither record: a typo, not a pass.
        report = await log.verify(target, anchors=saved, answered=answered)
        return report, answered is not None

    report, counted = _run(work, db)
    console = Console()
    if as_json:
        emit_json(
            {
                "ok": report.ok,
                "answered_turns_checked": counted,
                "conversations": [
                    {"conversation_id": v.conversation_id, "ok": v.ok, "rows": v.rows,
                     "problem": v.problem}
                    for v in report.conversations
                ],
            }
        )  # fmt: skip
        raise typer.Exit(0 if report.ok else 1)
    if not counted:
        console.print("[yellow]no conversation store in this database: answered turns not checked")
    for verdict in report.conversations:
        if verdict.ok:
            console.print(
                f"[green]ok[/green]   {escape(verdict.conversation_id)} ({verdict.rows} rows)"
            )
        else:
            assert verdict.problem is not None
            console.print(
                f"[red]BAD[/red]  {escape(verdict.conversation_id)}: first bad row"
                f" seq {verdict.problem.seq} ({verdict.problem.kind}):"
                f" {escape(verdict.problem.detail)}"
            )
    if not report.conversations:
        console.print("no audit rows to verify")
    raise typer.Exit(0 if report.ok else 1)


@app.command("anchor")
def anchor(
    out: Annotated[Path, typer.Option("-o", "--output", help="File to write the heads to.")],
    db: DbOption = None,
) -> None:
    """Save every conversation's head (seq, hash) to a file kept outside the database."""

    async def work(log: AuditLog) -> dict[str, Head]:
        return await log.heads()

    heads = _run(work, db)
    out.write_text(
        json.dumps(
            {c: {"seq": h.seq, "hash": h.hash} for c, h in heads.items()}, indent=2, sort_keys=True
        ),
        encoding="utf-8",
    )
    Console().print(f"wrote {len(heads)} heads to {out}")


# -- cost ---------------------------------------------------------------------------------


def cost_table(title: str, lines: list[CostLine]) -> Table:
    """A rich table of cost lines."""
    table = Table(title=title, title_justify="left")
    id_column(table, "", [line.label for line in lines])
    for name in ("calls", "attempts", "input", "output", "cache read", "cache write", "USD"):
        table.add_column(name, justify="right", no_wrap=True)
    for line in lines:
        flag = " ?" if line.unknown_models else ""
        t = line.tokens
        table.add_row(
            escape(line.label),
            str(line.calls),
            str(line.attempts),
            str(t.input),
            str(t.output),
            str(t.cache_read),
            str(t.cache_write),
            f"{line.usd:.6f}{flag}",
        )
    return table


def print_cost(report: CostReport, console: Console) -> None:
    """Per expert, per turn and total, then the models priced 0 for want of a price."""
    print_table(cost_table("by expert", list(report.by_expert.values())), console)
    print_table(cost_table("by turn", report.by_turn), console)
    print_table(cost_table("total", [report.total]), console)
    if report.unknown_models:
        console.print(
            "[yellow]? priced $0: not in audit.pricing.PRICES:[/yellow] "
            + escape(", ".join(sorted(report.unknown_models)))
        )


@app.command("cost")
def cost(
    conversation: ConvArg = None,
    every: AllOption = False,
    profile: ProfileOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Tokens and cost per expert, per turn and in total (cache reads shown)."""

    async def work(log: AuditLog) -> CostReport:
        ids = await _targets(log, conversation, every, profile)
        # Usage and cost are stored in clear: the report needs no master key.
        return cost_report(await conversation_transcripts(log, ids, decrypt=log.keys is not None))

    report = _run(work, db)
    if as_json:
        emit_json(
            {
                "by_expert": list(report.by_expert.values()),
                "by_turn": report.by_turn,
                "total": report.total,
                "unknown_models": report.unknown_models,
            }
        )
        return
    print_cost(report, Console())


# -- replay -------------------------------------------------------------------------------


def _short(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else value


@dataclasses.dataclass(frozen=True)
class Shown:
    """How a replayed conversation's texts are shown: the redactor, the field rules its
    rows recorded and the values of its ruled fields."""

    redactor: Redactor
    rules: dict[str, Rule]
    known: dict[str, str]


def diff_panel(diff: TurnDiff, shown_as: Shown | None = None) -> Panel | None:
    """What changed in one replayed turn, or `None` when nothing did; redacted (the texts
    shown, not what was replayed) when `shown_as` is given."""
    user = diff.turn.view.user_id

    def shown(text: str) -> str:
        if shown_as is None:
            return text
        return shown_as.redactor.text(text, user_id=user, known=shown_as.known)

    def field(name: str, value: Any) -> str:
        if shown_as is None:
            return _short(value)
        data = shown_as.redactor.request(
            {name: value}, shown_as.rules, user_id=user, known=shown_as.known
        )
        return _short(data.get(name, "[dropped]"))

    lines: list[Text] = []
    if diff.unknown_category:
        lines.append(
            Text(
                f"recorded category {diff.before.category} is unknown to the replaying app:"
                " not replayed (no change)",
                style="yellow",
            )
        )
    if diff.error is not None:
        lines.append(Text(shown(f"replay failed: {diff.error}"), style="red"))
    after = diff.after
    if after is not None:
        if diff.category_changed:
            lines.append(Text(f"category: {diff.before.category} -> {after.category}", style="red"))
        for change in diff.request_changes:
            before_text, after_text = (
                field(change.name, change.before),
                field(change.name, change.after),
            )
            lines.append(Text(f"request.{change.name}: {before_text} -> {after_text}", style="red"))
        if diff.need_more_info_changed:
            lines.append(
                Text(
                    shown(
                        f"need more info: {_short(diff.before.need_more_info)} ->"
                        f" {_short(after.need_more_info)}"
                    ),
                    style="yellow",
                )
            )
        for line in diff.reply_diff[2:]:
            style = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
            lines.append(Text(shown("reply " + line), style=style))
        if after.note:
            lines.append(Text(shown(after.note), style="dim"))
    if not lines:
        return None
    t = diff.turn
    title = f"{t.conversation_id} turn {t.number}: {shown(t.view.user_text or '')[:60]}"
    return Panel(Group(*lines), title=title, title_align="left")


def replay_app(
    spec: str | None, transcripts: list[Transcript], console: Console
) -> tuple[str, Orchestrator]:
    """The app a replay runs: `--app`, else the one the turns recorded (when it imports),
    else the default app, provided it has every recorded category.

    Raises:
        ReplayAppMismatch: no `--app`, and the app loaded lacks recorded categories.
    """
    if spec is not None:
        return spec, load_app(spec)
    recorded = (recorded_app(transcripts) or {}).get("spec")
    if isinstance(recorded, str) and recorded:
        try:
            orch = load_app(recorded)
        except ConfigError as e:
            console.print(f"[yellow]the recorded app cannot be loaded ({escape(str(e))})[/yellow]")
        else:
            console.print(f"replaying with the recorded app {escape(recorded)}")
            return recorded, orch
    orch = load_app(DEFAULT_APP)
    missing = missing_categories(transcripts, set(orch.categories) | BUILT_IN)
    if missing:
        module = DEFAULT_APP.partition(":")[0]
        raise ReplayAppMismatch(
            f"recorded categories {', '.join(missing)} are not in {module}: pass --app"
            " (module:attr of the app that recorded these turns)"
        )
    return DEFAULT_APP, orch


def summary_table(report: ReplayReport) -> Table:
    """Per conversation: turns replayed and how many changed, by kind."""
    table = Table(title="replay summary", title_justify="left")
    id_column(table, "conversation", [row[0] for row in report.summary()])
    for name in (
        "turns",
        "category",
        "request",
        "need more info",
        "reply",
        "errors",
    ):
        table.add_column(name, justify="right")
    for row in report.summary():
        table.add_row(escape(row[0]), *(str(v) for v in row[1:]))
    return table


@app.command("replay")
def replay(
    conversation: ConvArg = None,
    every: AllOption = False,
    profile: ProfileOption = None,
    app_spec: Annotated[
        str | None,
        app_option(
            "module:attr naming the Orchestrator (its categories, settings and models);"
            " default: the app the turns recorded, when it can be imported, else"
            f" {DEFAULT_APP}."
        ),
    ] = None,
    prompts: Annotated[
        Path | None, typer.Option("--prompts", help="A folder of prompt files to replay with.")
    ] = None,
    model: Annotated[
        list[str] | None,
        typer.Option(
            "--model",
            help="EXPERT=SPEC (repeatable),"
            " a SPEC for every expert, or `recorded` (no model call).",
        ),
    ] = None,
    db: DbOption = None,
    reveal: RevealOption = False,
    redaction: RedactionOption = None,
) -> None:
    """Re-run recorded turns with other prompts or models; exit 1 if a category or request
    changed.

    The recorded turns are replayed as stored; what is printed is redacted unless `--reveal`.
    """
    console = Console()
    redactor = redactor_for(reveal, redaction)

    shown: dict[str, Shown] = {}

    async def work(log: AuditLog) -> tuple[ReplayReport, str]:
        ids = await _targets(log, conversation, every, profile)
        spec, orch = replay_app(app_spec, await conversation_transcripts(log, ids), console)
        runners: dict[str | None, ReplayRunner] = {}  # One per recorded profile.
        report = ReplayReport()
        with Progress(console=console, transient=True, disable=len(ids) < 2) as progress:
            task = progress.add_task("replaying", total=len(ids))
            for cid in ids:
                [transcript] = await conversation_transcripts(log, [cid])
                recorded = (recorded_app([transcript]) or {}).get("profile")
                name = recorded if isinstance(recorded, str) and recorded in orch.profiles else None
                if name not in runners:
                    runners[name] = build_runner(
                        orch,
                        prompts_dir=prompts,
                        models=parse_models(list(model or [])),
                        profile=name,
                    )
                runner = runners[name]
                business = orch.profiles.get(name or "", orch.profile)
                # Every app routes to the built-in two.
                names = {c.name for c in business.categories} | BUILT_IN
                if redactor is not None:
                    rows = await log.events(cid)
                    shown[cid] = Shown(redactor, recorded_rules(rows), ruled_values(rows, redactor))
                report.diffs.extend(await replay_transcript(transcript, runner, categories=names))
                report.skipped += len(handoff_turns(transcript))
                progress.advance(task)
        return report, spec

    report, spec = _run(work, db)
    panels = (diff_panel(d, shown.get(d.turn.conversation_id)) for d in report.diffs)
    changed = [p for p in panels if p is not None]
    for panel in changed:
        console.print(panel)
    print_table(summary_table(report), console)
    unknown = [d for d in report.diffs if d.unknown_category]
    replayed = len(report.diffs) - len(unknown)
    verdict = (
        "changes found"
        if any(d.gating for d in report.diffs)
        else ("no category or request changed")
    )
    console.print(f"{replayed} turn(s) replayed: {verdict}")
    if unknown:
        Console(stderr=True, soft_wrap=True).print(
            f"[red]error:[/red] {len(unknown)} turn(s) not replayed: recorded categories"
            f" {', '.join(report.unknown_categories)} are not in {escape(spec)}"
            " (the app that recorded them is another: pass its --app)"
        )
    if report.skipped:
        console.print(
            f"{report.skipped} hand-off turn(s) (kept for a person, operator replies) skipped:"
            " recorded facts, not re-run"
        )
    raise typer.Exit(report.exit_code)
