"""Concurrent writers never fork a chain: 8 processes x 50 appends to one conversation."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import anyio.to_thread
import pytest

from frontdesk.audit.store import AuditLog
from tests.audit._audit_workers import append_many

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

PROCESSES = 8
APPENDS = 50


def _run_workers(url: str, conversation_id: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [
        ctx.Process(target=append_many, args=(url, conversation_id, w, APPENDS))
        for w in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES


async def _check(log: AuditLog, conversation_id: str) -> None:
    rows = await log.events(conversation_id)
    assert len(rows) == PROCESSES * APPENDS
    assert [r.seq for r in rows] == list(range(1, PROCESSES * APPENDS + 1))
    # No fork: every row links to the one before it, and each worker's appends all landed.
    assert all(b.prev_hash == a.hash for a, b in zip(rows, rows[1:], strict=False))
    assert len({(r.payload["worker"], r.payload["i"]) for r in rows}) == PROCESSES * APPENDS
    report = await log.verify(conversation_id)
    assert report.ok, report.failures


@pytest.mark.postgres
async def test_eight_processes_on_postgresql(conv_id: str, fresh_pg_url: str) -> None:
    log = await AuditLog.open(fresh_pg_url)  # migrates the fresh database before the workers
    try:
        await anyio.to_thread.run_sync(_run_workers, fresh_pg_url, conv_id)
        await _check(log, conv_id)
    finally:
        await log.aclose()


async def test_eight_processes_on_sqlite(conv_id: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    log = await AuditLog.open(url)
    try:
        await anyio.to_thread.run_sync(_run_workers, url, conv_id)
        await _check(log, conv_id)
    finally:
        await log.aclose()
