"""`frontdesk chat` as a tool: Ctrl-C, logs off stdout, retries, history, branches, pastes.

The process-level behaviours (SIGINT, a terminal's line limit, where log lines go) are
tested on the real command in a subprocess, some on a pseudo-terminal.
"""

from __future__ import annotations

import asyncio
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.threads.store import ConversationStore, MessageRecord
from tests.cli.test_errors import ENTRY, frontdesk

runner = CliRunner()

LOGGING_APP = """
import structlog
from frontdesk.examples.potato_shop import categories
from frontdesk.orchestrator import Orchestrator

log = structlog.get_logger()


def build(model=None, store="sqlite:///f.db"):
    cats = categories()
    for cat in cats:
        if cat.handler is not None:
            inner = cat.handler

            async def handler(request, context, inner=inner):
                log.info("handler.ran", marker="LOGLINE-MARKER")
                return await inner(request, context)

            object.__setattr__(cat, "handler", handler)
    return Orchestrator(cats, model=model, store=store)
"""


def _messages(url: str, conversation: str) -> list[MessageRecord]:
    async def read() -> list[MessageRecord]:
        store = await ConversationStore.open(url)
        try:
            return await store.messages(conversation)
        finally:
            await store.aclose()

    return asyncio.run(read())


def _chat(db: str, lines: str, *extra: str) -> str:
    result = runner.invoke(
        app,
        ["chat", "--db", db, "--model", "offline", "--conversation", "c", *extra],
        input=lines,
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    return result.output


SLOW_APP = """
import asyncio
from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel
from frontdesk.orchestrator import Orchestrator


async def hang(request):
    await asyncio.sleep(3600)


def build(model=None, store="sqlite:///f.db"):
    return Orchestrator(categories(), model=FunctionModel(hang), store=store)
"""


def _interrupt_chat(tmp_path: Path, *args: str, send: bytes = b"") -> None:
    """Start chat on a pseudo-terminal, type `send`, press Ctrl-C (the terminal's ^C, which
    sends SIGINT); chat must exit 130 within 5 s, with no traceback."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        # A test runner started in the background may ignore SIGINT; a terminal does not.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.chdir(tmp_path)
        os.execv(
            sys.executable, [sys.executable, "-c", ENTRY, "chat", "--db", "sqlite:///f.db", *args]
        )
    seen = b""

    def read_for(seconds: float, until: bytes | None = None) -> None:
        nonlocal seen
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (until is None or until not in seen):
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:  # the child has gone
                    return

    try:
        read_for(60, until=b"you>")
        assert b"you>" in seen, seen
        if send:
            os.write(fd, send)
        read_for(0.5)
        sent = time.monotonic()
        os.write(fd, b"\x03")
        deadline = sent + 5
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            read_for(0.1)
        else:  # pragma: no cover - the failure being tested for
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail(f"chat still running 5 s after Ctrl-C: {seen[-500:]!r}")
    finally:
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130
    assert b"Traceback" not in seen, seen


def test_ctrl_c_at_the_prompt_quits_at_once(tmp_path: Path) -> None:
    _interrupt_chat(tmp_path, "--model", "offline")


def test_ctrl_c_while_a_model_hangs_quits_at_once(tmp_path: Path) -> None:
    (tmp_path / "slow_app.py").write_text(SLOW_APP, encoding="utf-8")
    # The line is read at the first prompt; the turn then waits on the model forever.
    _interrupt_chat(tmp_path, "--app", "slow_app:build", send=b"hello there\r")


def test_log_lines_stay_off_the_chat(tmp_path: Path) -> None:
    (tmp_path / "logging_app.py").write_text(LOGGING_APP, encoding="utf-8")
    args = ("chat", "--app", "logging_app:build", "--model", "offline", "--db", "sqlite:///f.db")
    line = "where is my order 77120?\n/quit\n"
    quiet = frontdesk(*args, cwd=tmp_path, stdin=line)
    assert quiet.returncode == 0, quiet.stderr
    assert "ORDER_STATUS" in quiet.stdout
    assert "LOGLINE-MARKER" not in quiet.stdout + quiet.stderr
    verbose = frontdesk(*args, "--verbose", cwd=tmp_path, stdin=line)
    assert "LOGLINE-MARKER" in verbose.stderr and "LOGLINE-MARKER" not in verbose.stdout
    logged = frontdesk(*args, "--log-file", "chat.log", cwd=tmp_path, stdin=line)
    assert "LOGLINE-MARKER" not in logged.stdout + logged.stderr
    assert "LOGLINE-MARKER" in (tmp_path / "chat.log").read_text(encoding="utf-8")


def test_an_empty_line_does_not_quit_and_retry_stores_the_message_once(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    out = _chat(db, "\n   \nwhere is order 77120?\n/retry\n\nwhere is order 88213?\n")
    assert out.count("bot>") == 3
    assert "stored reply, not re-run" in out
    users = [m for m in _messages(db, "c") if m.role == "user"]
    assert [m.content for m in users] == ["where is order 77120?", "where is order 88213?"]
    assert len({m.client_message_id for m in users}) == 2 and all(
        m.client_message_id for m in users
    )


def test_resuming_shows_the_history(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    _chat(db, "where is order 77120?\n")
    again = _chat(db, "/quit\n")
    assert "1 you> where is order 77120?" in again
    assert again.index("1 you>") < again.index("you> ", again.index("1 you>") + 6)


def test_edit_regen_branches_and_switch(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'c.db'}"
    out = _chat(
        db,
        "where is order 77120?\nwhere is order 88213?\n/edit 2 where is order 77120 now?\n"
        "/regen\n/branches\n/edit 9 x\n/nosuch\n",
    )
    assert "/edit N: N must be 1..2" in out and "unknown command /nosuch" in out
    messages = _messages(db, "c")
    users = [m for m in messages if m.role == "user"]
    assert [m.content for m in users][-1] == "where is order 77120 now?"
    assert users[1].parent_id == users[2].parent_id  # the edit is a sibling branch
    edited_answers = [m for m in messages if m.parent_id == users[2].id]
    assert len(edited_answers) == 2  # answered, then regenerated
    assert out.count("● ") + out.count("○ ") == 3, out  # three leaves after /branches
    old_leaf = next(m for m in messages if m.parent_id == users[1].id)
    switched = _chat(db, f"/switch {old_leaf.id[-8:]}\n")
    assert "2 you> where is order 88213?" in switched


FAILING_APP = """
from frontdesk import Category, Orchestrator, Outcome
from frontdesk.testing import FunctionModel
from pydantic import BaseModel


class Transfer(BaseModel):
    amount: int = 5


async def transfer(request, context):
    raise RuntimeError("the core banking API is down")


def answer(request):
    if request.expert == "triage":
        return {"category": "TRANSFER", "reason": "money"}
    if request.expert == "request":
        return {"request": {"amount": 5}}
    if request.expert == "memory":
        return {"facts": []}
    return "Sorry, something went wrong."


def build(model=None, store="sqlite:///f.db"):
    cats = [Category(name="TRANSFER", description="Send money", request=Transfer,
                     handler=transfer, examples=["send 5 to Bob"])]
    return Orchestrator(cats, model=model or FunctionModel(answer, name="bank-double"),
                        store=store)
"""


def test_debug_shows_a_failed_handlers_exception_and_the_model_that_answered(
    tmp_path: Path,
) -> None:
    (tmp_path / "failing_app.py").write_text(FAILING_APP, encoding="utf-8")
    args = ("chat", "--app", "failing_app:build", "--db", "sqlite:///f.db", "--debug")
    done = frontdesk(*args, cwd=tmp_path, stdin="send 5 to Bob\n/quit\n")
    assert done.returncode == 0, done.stderr
    assert "offline stand-in" not in done.stdout  # the app's own model answered
    assert "Models: triage=bank-double" in done.stdout
    assert "handler failed:" in done.stdout
    assert "RuntimeError: the core banking API is down" in done.stdout


def test_debug_shows_each_experts_decisions_and_cost(tmp_path: Path) -> None:
    out = _chat(f"sqlite:///{tmp_path / 'c.db'}", "two bags of purple potatoes please\n", "--debug")
    for label in ("category", "request", "instruction", "tokens", "triage", "$"):
        assert label in out


def _pty_chat(tmp_path: Path, text: str) -> None:
    """Type `text` and Enter into `frontdesk chat` on a pseudo-terminal, then /quit."""
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.chdir(tmp_path)
        os.execv(
            sys.executable,
            [sys.executable, "-c", ENTRY, "chat", "--model", "offline", "--db",
             "sqlite:///p.db", "--conversation", "p"],
        )  # fmt: skip
    output = b""

    def read_until(marker: bytes, timeout: float = 60) -> None:
        nonlocal output
        deadline = time.monotonic() + timeout
        while marker not in output and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    output += os.read(fd, 65536)
                except OSError:
                    return

    try:
        read_until(b"you>")
        output = b""
        data = text.encode() + b"\r"
        for start in range(0, len(data), 1024):
            os.write(fd, data[start : start + 1024])
            select.select([fd], [], [], 0.01)
            if select.select([fd], [], [], 0)[0]:
                output += os.read(fd, 65536)
        read_until(b"you>")
        os.write(fd, b"/quit\r")
        read_until(b"\x00", timeout=10)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.timeout(120)
def test_a_long_paste_on_a_terminal_is_kept_whole(tmp_path: Path) -> None:
    """A terminal's canonical mode cuts a line at 4,095 characters; chat must not."""
    text = "where is order 77120? " + "x" * 9_000
    _pty_chat(tmp_path, text)
    [user] = [m for m in _messages(f"sqlite:///{tmp_path / 'p.db'}", "p") if m.role == "user"]
    assert len(user.content) == len(text)


def test_over_the_limit_is_refused_clearly(tmp_path: Path) -> None:
    out = _chat(f"sqlite:///{tmp_path / 'c.db'}", "y" * 20_000 + "\n")
    assert "the limit is 16,000" in out
    assert _messages(f"sqlite:///{tmp_path / 'c.db'}", "c") == []
