"""`frontdesk demo` and `frontdesk chat`: the potato shop end to end, and a REPL."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from frontdesk.audit.pricing import cost_of
from frontdesk.audit.transcript import build_transcript
from frontdesk.cli._errors import configure_logging, describe, silence_logging
from frontdesk.cli._options import (
    DbOption,
    ModelOption,
    app_option,
    db_option,
    db_url,
    invocation,
)
from frontdesk.devkit.app import DEFAULT_APP, describe_models, load_app
from frontdesk.errors import (
    ConversationNotFound,
    FrontdeskError,
    InvalidUserText,
    TurnFailed,
    UserError,
)
from frontdesk.masking import mask_url, scrub
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.config import offline_by_default
from frontdesk.orchestrator.reply import Reply
from frontdesk.orchestrator.stream import Delta, Done, Failed

console = Console()

DEMO_TURNS = [
    "I'd like to buy a bag of purple potatoes",
    "Actually, I want to buy two bags",
    "actually maybe Idaho potatoes are better this time of year",
    "no let's go back to my first plan but make it three bags",
    "Yes, please confirm",
    "Where is my order 77120?",
    "Hi, I'm Priya. My order 88213, placed on 3 March, arrived 40 minutes late and I was told"
    " the delivery fee would be refunded.",
    "Thanks, that's helpful",
    "By the way, I'm allergic to peanuts.",
]
NEXT_CONVERSATION = "Do you have potatoes that are good for a peanut-free dinner?"
"""The demo's second conversation: the memory expert's fact from the first one is used."""

HELP_SOURCE = "potato_shop/help.md"
"""The shop's help pages, added to the demo's knowledge (`frontdesk knowledge add`)."""
POLICY_QUESTION = "Should I keep them in the fridge or in a cupboard at home?"
"""The demo's policy question, answered from the help pages (docs/knowledge.md)."""

AppOption = Annotated[str, app_option("module:attr naming an Orchestrator.")]


def models_line(orch: Orchestrator) -> str:
    """Which models this app's experts use, as built (not what the defaults would be): an
    app that names its own models is not said to be on the offline stand-in."""
    names = {expert: scrub(model.name) for expert, model in orch.models.items()}
    if set(names.values()) == {"offline"}:
        why = "no ANTHROPIC_API_KEY or OPENAI_API_KEY set: " if orch.offline_by_default else ""
        return (
            f"{why}Using the offline stand-in model (deterministic, no network; not a"
            " language model)."
        )
    return "Models: " + ", ".join(f"{expert}={name}" for expert, name in names.items())


def _usage_line(reply: Reply) -> str:
    """Tokens and cost per expert (`?` marks a model without a listed price)."""
    parts = []
    for expert, u in reply.usage.items():
        model = reply.models.get(expert, "")
        cost = cost_of(
            model,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens,
        )
        price = f"${cost.usd:.6f}" if cost.known else "$?"
        parts.append(f"{expert} {u.total_input_tokens}in/{u.output_tokens}out {price}")
    return ", ".join(parts)


def _turn_table(number: int, text: str, reply: Reply) -> Table:
    table = Table(show_header=False, box=None, padding=(0, 1))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    table.add_row("user", escape(text))
    table.add_row("category", reply.category or "-")
    if reply.request is not None:
        table.add_row("request", escape(json.dumps(reply.request.model_dump(mode="json"))))
    elif reply.need_more_info is not None:
        table.add_row("missing", escape(", ".join(reply.need_more_info.missing) or "-"))
    table.add_row("instruction", escape(reply.outcome.instruction) if reply.outcome else "-")
    table.add_row("reply", f"[green]{escape(reply.text)}[/green]")
    if reply.sources:
        cited = "; ".join(f"{p.source} - {p.title} (v{p.version})" for p in reply.sources)
        table.add_row("sources", escape(cited))
    table.add_row("tokens", escape(_usage_line(reply)) or "-")
    return table


async def _demo(model: str | None, db: str) -> None:
    orch = load_app(DEFAULT_APP, model=model, db=db)
    conversation = "demo-" + datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:4]
    console.print(models_line(orch))
    console.print(f"Database: {mask_url(db)}   conversation: {conversation}\n", soft_wrap=True)
    try:
        for number, text in enumerate(DEMO_TURNS, 1):
            reply = await orch.handle(conversation, text, user_id="demo-user")
            console.print(Panel(_turn_table(number, text, reply), title=f"turn {number}"))
        await orch.memory.wait()  # The memory expert runs after each reply, in the background.
        remembered = await orch.memories("demo-user")
        console.print("\nRemembered about demo-user (long-term memory, across conversations):")
        for memory in remembered:
            console.print(f"  - {escape(memory.text)}  [dim]({memory.source})[/dim]")
        later = conversation + "-next"
        console.print(f"\nA new conversation, {later}: the fact is sent to every expert.")
        reply = await orch.handle(later, NEXT_CONVERSATION, user_id="demo-user")
        number = len(DEMO_TURNS) + 1
        console.print(Panel(_turn_table(number, NEXT_CONVERSATION, reply), title=f"turn {number}"))
        help_text = resources.files("frontdesk.examples.potato_shop").joinpath("help.md")
        count = await orch.knowledge.add(HELP_SOURCE, help_text.read_text(encoding="utf-8"))
        console.print(
            f"\nThe shop's help pages ({HELP_SOURCE}, {count} passages) are added to its"
            " knowledge: a policy question is answered from them, citing its source."
        )
        reply = await orch.handle(later, POLICY_QUESTION, user_id="demo-user")
        console.print(
            Panel(_turn_table(number + 1, POLICY_QUESTION, reply), title=f"turn {number + 1}")
        )
    finally:
        await orch.aclose()
    me, where = invocation(), shlex.quote(mask_url(db))
    console.print("\nSee it again:")
    for command in ("thread show", "audit show"):
        console.print(f"  {me} {command} {conversation} --db {where}", soft_wrap=True)
    console.print(f"  {me} memory show demo-user --db {where}", soft_wrap=True)
    console.print(f"  {me} knowledge search 'storing potatoes' --db {where}", soft_wrap=True)
    console.print(
        "\nThe pages: a customer's chat and two operators' desks, a hand-off between them"
        " (needs the serve extra: pip install 'frontdesk\\[serve]'):"
    )
    console.print(f"  {me} demo --serve", soft_wrap=True)


def demo(
    model: ModelOption = None,
    db: Annotated[
        str | None, db_option("Database URL (default: a fresh SQLite file for each run).")
    ] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Serve the potato shop instead: a customer chat page and two operator desks,"
            " with fresh demo tokens (DEV ONLY), their URLs printed.",
        ),
    ] = False,
    port: Annotated[int, typer.Option("--port", help="With --serve: the port.")] = 8000,
) -> None:
    """The potato shop end to end: per turn the category, request, instruction and reply.

    Each run gets a fresh database unless `--db` is given, so a second run is the same as
    the first (the refund of the first run is not "already refunded" in the second).
    `--serve` serves it instead, with a customer's chat page and two operators' desks.
    """
    if db is None:
        folder = Path(tempfile.mkdtemp(prefix="frontdesk-demo-"))
        db = f"sqlite:///{folder / 'demo.db'}"
    if serve:
        _serve_demo(model, db, port)
        return
    asyncio.run(_demo(model, db))


def _serve_demo(model: str | None, db: str, port: int) -> None:
    """`frontdesk serve --demo-tokens --operators 2` on the potato shop, offline when no
    provider key is set (named, so serve's fail-closed check is satisfied on purpose)."""
    from frontdesk.cli import serve as serve_command

    if model is None and offline_by_default(None):
        model = "offline"
    console.print(describe_models(model))
    console.print(
        "Open the customer chat in one window and each operator desk in another. As the"
        ' customer, ask for a person ("can I talk to a person?"): it reaches both desks;'
        " open it on one and take it; the other desk sees who has it. Ctrl-C stops.",
        soft_wrap=True,
    )
    serve_command.serve(app=DEFAULT_APP, db=db, model=model, port=port, demo_tokens=True)


HELP = """commands:
  /history            the active path, numbered (the numbers /edit takes)
  /retry              send the last message again with the same client_message_id
  /edit N TEXT        replace your message N with TEXT (a new branch)
  /regen              answer your last message again (a new branch)
  /branches           list the branches (leaves) of the conversation
  /switch ID          make the branch ending at message ID (or its last 8 characters) active
  /help               this text
  /quit               leave (Ctrl-D too); a line holding only \"\"\" starts and ends a block"""


def read_message(prompt: str = "you> ") -> str:
    """One message from the terminal; `\"\"\"` on a line of its own opens a multi-line block.

    On a terminal, `readline` reads the line in raw mode, so a paste is not cut at the
    kernel's 4,095-character line limit, and a bracketed multi-line paste stays one message.

    Raises:
        EOFError: Ctrl-D or the end of piped input.
    """
    line = input(prompt)
    if line.strip() != '"""':
        return line
    lines: list[str] = []
    while (more := input("...  ")).strip() != '"""':
        lines.append(more)
    return "\\n".join(lines)


@dataclass
class ChatSession:
    """One terminal chat: the orchestrator, the conversation, and the last message sent."""

    orch: Orchestrator
    conversation: str
    user_id: str | None
    debug: bool
    console: Console
    last: tuple[str, str] | None = None
    """The last message sent and its client_message_id (what `/retry` resends)."""
    path: list[tuple[str, str, str]] = field(default_factory=list)
    """The active path as (message id, role, text), for /edit numbering."""

    async def load_path(self) -> None:
        """Read the active path (what /edit numbers refer to)."""
        try:
            messages = await self.orch.transcript(self.conversation, user_id=self.user_id)
        except ConversationNotFound:  # A new conversation (or, to this user, no such one).
            messages = []
        self.path = [(m.id, m.role, m.content) for m in messages if m.role in ("user", "assistant")]

    async def history(self, *, quiet_if_empty: bool = False) -> None:
        """Print the active path, user messages numbered."""
        await self.load_path()
        if not self.path:
            if not quiet_if_empty:
                self.console.print("[dim](no messages yet)[/dim]")
            return
        number = 0
        for _id, role, text in self.path:
            if role == "user":
                number += 1
                self.console.print(f"[bold]{number:>3} you>[/bold] {escape(text)}")
            else:
                self.console.print(f"[green]    bot>[/green] {escape(text)}")

    async def handler_error(self, reply: Reply) -> str | None:
        """The handler's exception and traceback for a turn whose handler failed, from the
        turn's audit event (the log line is kept off the chat), or None."""
        log = self.orch.audit_log
        if not reply.handler_failed or log is None:
            return None
        rows = await log.events(self.conversation)
        for turn in build_transcript(self.conversation, rows).turns:
            if turn.turn_id == reply.user_message_id and turn.handler_error:
                return "\n".join(filter(None, [turn.handler_traceback, turn.handler_error]))
        return "the handler failed (its audit event is not written yet: frontdesk audit show)"

    async def show(self, reply: Reply, *, streamed: bool = False) -> None:
        """The reply (unless its text was streamed already); with `--debug`, what each expert
        decided and spent, and a failed handler's exception, else the route and the request
        in one dim line."""
        if self.debug:
            self.console.print(_turn_table(0, self.last[0] if self.last else "", reply))
            failure = await self.handler_error(reply)
            if failure is not None:
                self.console.print(f"[red]handler failed:[/red] {escape(failure)}")
        else:
            detail = reply.category or ""
            if reply.request is not None:
                detail += " " + json.dumps(reply.request.model_dump(mode="json"))
            self.console.print(f"[dim]{escape(detail)}[/dim]")
        replayed = " [dim](stored reply, not re-run)[/dim]" if reply.replayed else ""
        if streamed:
            if replayed:
                self.console.print(replayed.strip())
            return
        self.console.print(f"[green]bot>[/green] {escape(reply.text)}{replayed}")

    async def send(self, text: str, client_message_id: str) -> None:
        """Send one message and print the reply as it streams; a failed turn keeps the
        message for `/retry` (the partial text shown is not stored)."""
        self.last = (text, client_message_id)
        streaming = False
        async for event in self.orch.stream(
            self.conversation, text, user_id=self.user_id, client_message_id=client_message_id
        ):
            if isinstance(event, Delta):
                if not streaming:
                    self.console.print("[green]bot>[/green] ", end="")
                    streaming = True
                self.console.print(escape(event.text), end="", soft_wrap=True)
            elif isinstance(event, Done):
                if streaming:
                    self.console.print()
                await self.show(event.reply, streamed=streaming)
            elif isinstance(event, Failed):
                if streaming:
                    self.console.print()
                raise event.error

    def _user_message(self, number: str) -> str:
        users = [mid for mid, role, _ in self.path if role == "user"]
        if not number.isdigit() or not 1 <= int(number) <= len(users):
            raise UserError(f"/edit N: N must be 1..{len(users)} (see /history)")
        return users[int(number) - 1]

    async def command(self, line: str) -> bool:
        """Run a `/command`; returns False for /quit."""
        name, _, rest = line[1:].partition(" ")
        rest = rest.strip()
        if name in ("quit", "exit", "q"):
            return False
        if name == "help":
            self.console.print(HELP, markup=False)
        elif name == "history":
            await self.history()
        elif name == "retry":
            if self.last is None:
                raise UserError("nothing to retry yet")
            await self.send(*self.last)
        elif name == "edit":
            number, _, text = rest.partition(" ")
            if not text.strip():
                raise UserError("usage: /edit N TEXT (N from /history)")
            await self.load_path()
            edited = await self.orch.edit(self._user_message(number), text, user_id=self.user_id)
            await self.show(edited)
        elif name == "regen":
            leaf = await self.orch.transcript(self.conversation, user_id=self.user_id)
            answers = [m for m in leaf if m.role == "assistant"]
            if not answers:
                raise UserError("no reply to regenerate yet")
            await self.show(await self.orch.regenerate(answers[-1].id, user_id=self.user_id))
        elif name == "branches":
            active = {
                m.id for m in await self.orch.transcript(self.conversation, user_id=self.user_id)
            }
            for leaf_message in await self.orch.branches(self.conversation, user_id=self.user_id):
                mark = "●" if leaf_message.id in active else "○"
                preview = " ".join(leaf_message.content.split())[:60]
                self.console.print(f"{mark} {leaf_message.id}  {escape(preview)}")
        elif name == "switch":
            await self.orch.switch_branch(
                self.conversation, await self._resolve(rest), user_id=self.user_id
            )
            await self.history()
        else:
            raise UserError(f"unknown command /{name}; /help lists them")
        return True

    async def _resolve(self, ref: str) -> str:
        """A message id, or the unique message whose id ends with `ref`."""
        if not ref:
            raise UserError("usage: /switch ID (ids from /branches)")
        matches = [
            m.id
            for m in await self.orch.branches(self.conversation, user_id=self.user_id)
            if m.id == ref or m.id.endswith(ref)
        ]
        if len(matches) != 1:
            raise UserError(f"/switch {ref}: {len(matches)} branches match; give more of the id")
        return matches[0]


def _chat(
    app: str,
    model: str | None,
    db: str,
    conversation: str,
    user_id: str | None,
    debug: bool,
) -> None:
    """The read-answer loop: input is read on the main thread, turns run on one event loop.

    Reading on the main thread (not a worker thread) is what lets Ctrl-C stop the chat at
    once: SIGINT interrupts `input()`, and `asyncio.Runner` cancels a running turn.
    """
    if sys.stdin.isatty():
        import readline  # noqa: F401 - raw-mode line editing: no 4,095-character cut

    with asyncio.Runner() as runner:
        orch = load_app(app, model=model, db=db)
        try:
            # Open now, so a dead or corrupt database fails before the first prompt.
            runner.run(orch.open())
            console.print(models_line(orch))
            console.print(
                f"Database: {mask_url(db)}   conversation: {conversation}"
                "   (/help for commands; /quit or Ctrl-D leaves)",
                soft_wrap=True,
            )
            session = ChatSession(orch, conversation, user_id, debug, console)
            runner.run(session.history(quiet_if_empty=True))
            while True:
                try:
                    text = read_message()
                except EOFError:
                    break
                if not text.strip():
                    continue
                try:
                    if text.startswith("/") and not text.startswith("//"):
                        if not runner.run(session.command(text.strip())):
                            break
                    else:
                        text = text[1:] if text.startswith("//") else text
                        runner.run(session.send(text, uuid.uuid4().hex))
                except TurnFailed as e:
                    console.print(
                        f"[yellow]{escape(e.safe_reply)}[/yellow]"
                        f"  [dim]({e.stage}: {escape(str(e))}; /retry sends it again)[/dim]"
                    )
                except (InvalidUserText, UserError) as e:
                    console.print(f"[red]{escape(describe(e))}[/red]")
                except FrontdeskError as e:
                    console.print(f"[red]error: {escape(describe(e))}[/red] (/retry to resend)")
        finally:
            runner.run(asyncio.wait_for(orch.aclose(), timeout=10))


def chat(
    ctx: typer.Context,
    app: AppOption = DEFAULT_APP,
    model: ModelOption = None,
    db: DbOption = None,
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", help="Carry on this conversation id (shows its history)."),
    ] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="The user id the conversation belongs to.")
    ] = None,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", help="Per turn: category, request or missing fields, instruction, cost."
        ),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", help="Show log lines (on stderr) during the chat.")
    ] = False,
    log_file: Annotated[
        Path | None, typer.Option("--log-file", help="Append the log lines to this file.")
    ] = None,
) -> None:
    """Talk to any Orchestrator in the terminal."""
    if log_file is not None:
        configure_logging(ctx, path=log_file)
    elif not verbose:
        silence_logging()
    conversation = conversation or "chat-" + uuid.uuid4().hex[:8]
    _chat(app, model, db_url(db), conversation, user, debug)
