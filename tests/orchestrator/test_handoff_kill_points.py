"""SIGKILL a hand-off turn right after a commit, then retry it: the hand-off is open once.

The HUMAN route and a handler's `Outcome(handoff=...)` open the hand-off in the very
transaction that stores the outcome (`threads.handoff.open_in`), so a crash after that
commit cannot lose it; the retry replays and opens no second one; the customer's next
message is kept for the person (no model call).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from frontdesk.threads.models import HandoffRow
from tests._pg import create_database, drop_database
from tests.orchestrator import _handoff_kill_worker as worker

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

WORKER = Path(worker.__file__)
REPO = Path(__file__).resolve().parents[2]
POINTS = ["human_after_finish", "handler_after_outcome", "handler_after_finish"]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'frontdesk.db'}"
        return
    url = create_database()
    try:
        yield url
    finally:
        drop_database(url)


@pytest.mark.parametrize("point", POINTS)
async def test_a_kill_after_the_commit_keeps_the_handoff_and_a_retry_opens_no_second(
    backend_url: str, point: str
) -> None:
    run = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(WORKER), backend_url, point],
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]

    orch = worker.orchestrator(backend_url)
    await orch.open()
    try:
        opened = await orch.store.handoffs.current(worker.CONVERSATION)
        assert opened is not None  # Opened by the killed turn's own transaction.
        reason = "asked for a person" if point.startswith("human") else "account closure"
        assert opened.reason.startswith(reason)
        retry = await orch.handle(
            worker.CONVERSATION, worker.text_for(point), client_message_id=worker.CLIENT_ID
        )
        assert retry.handoff is True
        assert retry.outcome is not None and retry.outcome.handoff is not None
        assert "handoff" not in retry.outcome.data and "reason" not in retry.outcome.data
        nxt = await orch.handle(worker.CONVERSATION, "hello?", client_message_id="m-2")
        assert nxt.handoff is True and nxt.category is None  # Kept for the person.
        table = HandoffRow.__table__  # type: ignore[attr-defined]
        async with orch.store.engine.connect() as conn:
            rows = (await conn.execute(sa.select(sa.func.count()).select_from(table))).scalar()
        assert rows == 1  # Never a second hand-off.
    finally:
        await orch.aclose()
