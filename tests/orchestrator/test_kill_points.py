"""SIGKILL a turn at each point of its write path, then retry it: effects happen once.

A worker process (`_kill_worker.py`) runs one money-moving turn and kills itself at a
point; this process then retries the same client message id. The bank deduplicates on
`HandlerContext.idempotency_key`, so the transfer happens once whatever the point; a
kill after the outcome is stored never runs the handler again.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._pg import create_database, drop_database
from tests.orchestrator import _kill_worker as worker

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

WORKER = Path(worker.__file__)
REPO = Path(__file__).resolve().parents[2]

# Point -> handler runs in all (the killed try and the retry).
POINTS = {"in_handler": 2, "after_outcome": 1, "in_response": 1, "before_finish": 1}


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


@pytest.mark.parametrize("point", list(POINTS))
async def test_a_kill_at_any_point_then_a_retry_moves_the_money_once(
    backend_url: str, point: str, tmp_path: Path
) -> None:
    folder = tmp_path / "effects"
    folder.mkdir()
    run = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(WORKER), backend_url, point, str(folder)],
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]
    assert len((folder / "runs").read_text().split()) == 1

    orch = worker.orchestrator(backend_url, folder, "none")
    reply = await orch.handle(worker.CONVERSATION, worker.TEXT, client_message_id=worker.CLIENT_ID)
    again = await orch.handle(worker.CONVERSATION, worker.TEXT, client_message_id=worker.CLIENT_ID)
    transcript = await orch.transcript(worker.CONVERSATION)
    await orch.aclose()

    runs = (folder / "runs").read_text().split()
    bank = (folder / "bank").read_text().split()
    assert len(bank) == 1 == len(set(runs))  # One transfer; every run had the same key.
    assert len(runs) == POINTS[point]  # Killed after the outcome was stored: never re-run.
    assert reply.category == "TRANSFER" and again.replayed
    assert again.message_id == reply.message_id
    assert [(m.role, m.failed) for m in transcript] == [("user", False), ("assistant", False)]


async def test_a_kill_between_two_requests_then_a_retry_runs_each_handler_once(
    backend_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "effects"
    folder.mkdir()
    run = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(WORKER), backend_url, "between_steps", str(folder)],
        cwd=REPO,
        capture_output=True,
        timeout=120,
    )
    assert run.returncode == -signal.SIGKILL, run.stderr.decode()[-2000:]
    assert len((folder / "runs").read_text().split()) == 1  # The transfer, stored; no bill.

    orch = worker.orchestrator(backend_url, folder, "none")
    reply = await orch.handle(worker.CONVERSATION, worker.TWO, client_message_id=worker.CLIENT_ID)
    again = await orch.handle(worker.CONVERSATION, worker.TWO, client_message_id=worker.CLIENT_ID)
    await orch.aclose()

    runs = (folder / "runs").read_text().split()
    bank = (folder / "bank").read_text().split()
    assert len(runs) == 2 == len(set(runs)) == len(bank)  # Each step once, its own key.
    assert reply.categories == ["TRANSFER", "BILL"] and again.replayed
    assert reply.outcome is not None
    assert "(TRANSFER)" in reply.outcome.instruction and "(BILL)" in reply.outcome.instruction
