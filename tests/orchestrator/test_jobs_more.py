"""Issue 22's remaining jobs, on SQLite and PostgreSQL: retention as a periodic job run once
per period across runners; an erasure recorded with its job and finished by the runner when
its caller failed; waiting for learning that workers do; a span and a metric per job run.
The kill tests (a process SIGKILLed mid-erasure) are in test_job_kill_points.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from frontdesk.audit.chains import user_chain_id
from frontdesk.audit.store import AuditLog
from frontdesk.db import create_engine, dispose_engine, run_write
from frontdesk.errors import ConfigError
from frontdesk.jobs import store as rows
from frontdesk.jobs.runner import JobKind, Jobs
from frontdesk.jobs.store import JobSpec, JobStore
from frontdesk.orchestrator import Orchestrator, RetentionPolicy, erasure
from frontdesk.threads import erasure as store_erasure
from frontdesk.threads.store import ConversationStore
from tests._otel import recorded_spans
from tests.orchestrator import _jobs_worker as shop
from tests.orchestrator.test_jobs import conninfo
from tests.privacy import _app
from tests.privacy.test_privacy import ZOE_STRINGS, new_key, raw_copies, verify_all

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'frontdesk.db'}"
    return str(request.getfixturevalue("fresh_pg_url"))


async def sql(url: str, statement: str) -> list[Any]:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            result = await conn.execute(sa.text(statement))
            return list(result) if result.returns_rows else []
    finally:
        await dispose_engine(engine)


async def until(check: Any, within: float) -> None:
    began = time.monotonic()
    while not await check():
        assert time.monotonic() - began < within, f"not within {within} s"
        await asyncio.sleep(0.05)


# -- retention as a periodic job --------------------------------------------------------


async def test_retention_runs_once_per_period_across_two_runners_and_is_audited(
    url: str,
) -> None:
    key = new_key()
    await _app.record(url, key, turns=2)
    await sql(url, "UPDATE audit_key SET period = '2020-01'")  # Keys of a long-gone month.
    await asyncio.sleep(1.1)  # Every message is now older than the policy's age.
    policy = RetentionPolicy(older_than=timedelta(seconds=1), transcripts=True, every=1)
    first = _app.orchestrator(url, key, retention=policy)
    second = _app.orchestrator(url, key, retention=policy)
    began = time.monotonic()
    with recorded_spans() as spans:
        await first.open()
        await second.open()
        try:
            assert first.audit_log is not None
            log = first.audit_log

            async def shredded() -> bool:
                return any(r.kind == "retention" for r in await log.events("retention"))

            await until(shredded, 20)
            await asyncio.sleep(3.2)  # Three more periods: each run once, changing nothing.
        finally:
            await first.aclose()
            await second.aclose()
    elapsed = time.monotonic() - began
    runs = [s for s in spans.get_finished_spans() if s.name == "frontdesk.job privacy.retention"]
    # Once per period in all (two runners each running every period would be twice that).
    assert 3 <= len(runs) <= elapsed + 2, (len(runs), elapsed)
    assert {s.attributes["frontdesk.job.outcome"] for s in runs if s.attributes} == {"succeeded"}
    async with await AuditLog.open(url, master_key=key) as log:
        events = [r for r in await log.events("retention") if r.kind == "retention"]
        zoe = await log.events("zoe-0")
    assert len(events) == 1  # Idempotent: the later runs found nothing left to shred.
    counts = events[0].payload["counts"]
    assert counts["audit_keys"] == 2 and counts["messages"] == 6  # Zoë's 4, Bob's 2.
    assert all(r.payload.get("erased") for r in zoe)
    assert raw_copies(url, ["99887766"]) == 0 if "sqlite" in url else True
    assert await verify_all(url)


async def test_retention_is_opt_in_and_its_settings_are_checked(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    plain = Orchestrator([], model="offline", store=db)
    assert plain.retention is None
    await plain.open()
    assert "privacy.retention" not in [p.name for p in plain.jobs.periodic]
    assert "privacy.erase" in [k.name for k in plain.jobs.kinds]
    await plain.aclose()
    given = Orchestrator([], model="offline", store=db, retention="90d")
    assert given.retention == RetentionPolicy(older_than=timedelta(days=90))
    await given.open()
    (job,) = [p for p in given.jobs.periodic if p.name == "privacy.retention"]
    assert job.every == 3600 and job.exclusive and job.cron() == "0 */1 * * *"
    await given.aclose()
    with pytest.raises(ConfigError, match="audit=False"):
        Orchestrator([], model="offline", store=db, audit=False, retention="90d")
    with pytest.raises(ConfigError, match="90d"):
        Orchestrator([], model="offline", store=db, retention="soon")
    with pytest.raises(ConfigError, match="divide a day"):
        RetentionPolicy(older_than=timedelta(days=1), every=7 * 3600)
    assert RetentionPolicy(older_than=timedelta(days=1), every=86400).every == 86400


def test_serve_and_worker_take_a_retention_age(tmp_path: Path) -> None:
    from frontdesk.service import ServiceSettings
    from frontdesk.service._startup import Startup, describe
    from tests.service.conftest import SECRET

    settings = ServiceSettings.from_env(
        {
            "FRONTDESK_JWT_SECRET": SECRET,
            "FRONTDESK_SERVE_DB": f"sqlite:///{tmp_path / 's.db'}",
            "FRONTDESK_SERVE_RETENTION": "12w",
            "FRONTDESK_SERVE_RETENTION_TRANSCRIPTS": "1",
        }
    )
    orch = settings.orchestrator()
    assert orch.retention == RetentionPolicy(older_than=timedelta(weeks=12), transcripts=True)
    lines = describe(orch, Startup(db="sqlite:///s.db", workers=1, allow_clear_audit=True))
    assert "retention: payloads older than 84 days shredded every 3600 s" in lines[4]


def test_worker_and_serve_refuse_a_bad_retention_age(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from frontdesk.cli import app as cli

    for name in ("APP", "DB", "JOBS", "RETENTION", "RETENTION_TRANSCRIPTS"):
        monkeypatch.delenv(f"FRONTDESK_SERVE_{name}", raising=False)  # Restored after.
    db = f"sqlite:///{tmp_path / 'w.db'}"
    for command in (["worker"], ["serve", "--model", "offline", "--allow-clear-audit"]):
        result = CliRunner().invoke(cli, [*command, "--db", db, "--retention", "soon"])
        assert result.exit_code == 2 and "90d" in result.output, result.output


# -- erasure as a job -------------------------------------------------------------------


async def test_erase_user_records_its_request_and_leaves_no_job_behind(url: str) -> None:
    key = new_key()
    await _app.record(url, key, turns=2)
    orch = _app.orchestrator(url, key)
    report = await orch.erase_user(_app.ZOE, requested_by="ticket-7")
    began = time.monotonic()
    await orch.drain(timeout=10)  # The job its caller completed is not waited for.
    assert time.monotonic() - began < 2.0
    assert report.messages == 4 and report.conversations == 1  # As before: the counts.
    assert await orch.jobs.list() == []
    (request,) = await sql(
        url, "SELECT user_id, requested_by, done_at, counts FROM erasure_request"
    )
    assert request[0] is None and request[1] == "ticket-7" and request[2] is not None
    counts = request[3] if isinstance(request[3], dict) else json.loads(request[3])
    assert counts == report.counts()
    await orch.aclose()
    assert raw_copies(url, ZOE_STRINGS) == 0


async def test_an_erasure_whose_caller_failed_is_finished_by_the_job_runner(url: str) -> None:
    key = new_key()
    await _app.record(url, key, turns=2)
    store = await ConversationStore.open(url)
    log = await AuditLog.open(store.engine, master_key=key)

    def fail(step: str) -> None:
        if step == "messages":
            raise RuntimeError("the audit database went away")

    try:
        with pytest.raises(RuntimeError, match="went away"):
            await erasure.request_erasure(store.engine, log, _app.ZOE, after_step=fail)
        (waiting,) = await JobStore(store.engine).list()
        assert waiting.kind == "privacy.erase" and waiting.args.keys() == {"request_id"}
    finally:
        await log.aclose()
        await store.aclose()
    orch = _app.orchestrator(url, key)  # Inline jobs: its runner finishes the erasure.
    await orch.open()
    began = time.monotonic()
    await orch.drain(timeout=30)
    took = time.monotonic() - began
    assert took < erasure.ERASE_LEASE + 10
    assert await orch.jobs.list() == []
    assert orch.audit_log is not None
    erased = list(await orch.audit_log.events(user_chain_id(_app.ZOE, orch.audit_log.refs)))
    assert [r.kind for r in erased] == ["erased"]
    assert erased[0].payload["counts"]["audit_keys"] >= 1
    (request,) = await sql(url, "SELECT user_id, done_at FROM erasure_request")
    assert request[0] is None and request[1] is not None
    await orch.aclose()
    assert raw_copies(url, ZOE_STRINGS) == 0
    assert await verify_all(url)


async def test_a_job_for_a_finished_request_changes_nothing(url: str) -> None:
    orch = Orchestrator([], model="offline", store=url)
    await orch.erase_user("nobody")
    (request_id,) = [r[0] for r in await sql(url, "SELECT id FROM erasure_request")]
    job = erasure.erase_job_kind(orch.store.engine, orch.audit_log)
    await job.run({"request_id": request_id})  # Done already: returns at once.
    await job.run({"request_id": 999})  # No such request.
    assert orch.audit_log is not None
    events = await orch.audit_log.events(user_chain_id("nobody", orch.audit_log.refs))
    assert [e.kind for e in events] == ["erased"]
    await orch.aclose()


# -- waiting for learning that workers do -------------------------------------------------


async def test_waiting_for_learning_with_no_worker_alive_returns_at_once_and_says_so(
    url: str,
) -> None:
    orch = shop.app(store=url, jobs="worker")
    await orch.handle("conv-w", shop.FACT_TEXT, user_id="u-wait")
    began = time.monotonic()
    with capture_logs() as logs:
        left = await orch.memory.wait()
    assert time.monotonic() - began < 3.0  # Not the 60 s of `CLOSE_TIMEOUT`.
    assert left == 1
    assert any(e["event"] == "jobs.no_runner" for e in logs)
    await orch.aclose()


async def test_waiting_for_learning_sees_the_rows_a_worker_finished(url: str) -> None:
    """A worker in another process is stood in for by a second runner in this one: the
    waiting orchestrator runs no jobs and learns it is done from the rows alone."""
    orch = shop.app(store=url, jobs="worker")
    await orch.open()
    other = shop.app(store=url, jobs="worker")
    await other.open()
    worker = asyncio.get_running_loop().create_task(other.jobs.run_worker(handle_signals=False))
    try:
        await until(lambda: orch.jobs.store.runners_alive(within=5.0), 20)
        await orch.handle("conv-r", shop.FACT_TEXT, user_id="u-rows")
        began = time.monotonic()
        assert await orch.memory.wait(within=30) == 0
        assert time.monotonic() - began < 10.0
        assert [m.text for m in await orch.memories("u-rows")] == ["Lives in Mumbai"]
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        await other.aclose()
        await orch.aclose()


# -- telemetry ---------------------------------------------------------------------------


def runs(kind: str, outcome: str) -> float:
    labels = {"frontdesk_job_kind": kind, "frontdesk_job_outcome": outcome}
    return REGISTRY.get_sample_value("frontdesk_job_runs_total", labels) or 0.0


async def test_each_job_run_is_a_span_and_a_count_with_its_outcome(url: str) -> None:
    store = await ConversationStore.open(url)
    failures = {"n": 0}

    async def flaky(args: Mapping[str, Any]) -> None:
        if failures["n"] < 1:
            failures["n"] += 1
            raise RuntimeError("once")

    async def broken(args: Mapping[str, Any]) -> None:
        raise ValueError("always")

    kinds = [
        JobKind(name="test.flaky", run=flaky, backoff=0.1),
        JobKind(name="test.broken", run=broken, attempts=2, backoff=0.1),
    ]
    jobs = Jobs(store=JobStore(store.engine), conninfo=conninfo(store), kinds=kinds)
    before = {
        (k, o): runs(k, o)
        for k in ("test.flaky", "test.broken")
        for o in ("succeeded", "retried", "failed")
    }
    specs = [
        JobSpec(kind="test.flaky", args={}, lock="flaky:1"),
        JobSpec(kind="test.broken", args={}),
    ]
    recorded = await run_write(store.engine, lambda conn: rows.defer(conn, specs))
    jobs.recorded(recorded)
    ids = [job.id for job in recorded]
    try:
        with recorded_spans() as spans:
            await jobs.start()
            await jobs.drain(timeout=30)
            await jobs.aclose()
    finally:
        await store.aclose()
    seen = sorted(
        (
            str(a["frontdesk.job.kind"]),
            int(a["frontdesk.job.attempt"]),  # type: ignore[arg-type]
            str(a["frontdesk.job.outcome"]),
            a.get("frontdesk.job.key"),
            a["frontdesk.job.id"],
        )
        for s in spans.get_finished_spans()
        if s.name.startswith("frontdesk.job test.") and (a := s.attributes) is not None
    )
    assert seen == [
        ("test.broken", 1, "retried", None, ids[1]),
        ("test.broken", 2, "failed", None, ids[1]),
        ("test.flaky", 1, "retried", "flaky:1", ids[0]),
        ("test.flaky", 2, "succeeded", "flaky:1", ids[0]),
    ]
    failed = [s for s in spans.get_finished_spans() if s.name == "frontdesk.job test.broken"]
    assert all(s.status.status_code.name == "ERROR" for s in failed)
    assert all((s.attributes or {}).get("error.type") == "ValueError" for s in failed)
    after = {key: runs(*key) - value for key, value in before.items()}
    assert after == {
        ("test.flaky", "succeeded"): 1,
        ("test.flaky", "retried"): 1,
        ("test.flaky", "failed"): 0,
        ("test.broken", "succeeded"): 0,
        ("test.broken", "retried"): 1,
        ("test.broken", "failed"): 1,
    }


async def test_a_request_row_forgets_its_user_when_done(url: str) -> None:
    store = await ConversationStore.open(url)
    try:
        request_id = await run_write(
            store.engine, lambda conn: store_erasure.record_request(conn, "u-9", None)
        )
        assert await run_write(
            store.engine, lambda conn: store_erasure.finish_request(conn, request_id, {"x": 1})
        )
        again = await run_write(
            store.engine, lambda conn: store_erasure.finish_request(conn, request_id, {"x": 2})
        )
        assert not again  # Finished once: a second runner's finish changes nothing.
        read = await run_write(store.engine, lambda c: store_erasure.read_request(c, request_id))
        assert read is not None and read.done and read.user_id is None and read.counts == {"x": 1}
    finally:
        await store.aclose()


async def test_a_periodic_tick_is_claimed_once_and_runners_are_seen_alive(tmp_path: Path) -> None:
    store = await ConversationStore.open(f"sqlite:///{tmp_path / 't.db'}")
    jobs = JobStore(store.engine)
    try:
        assert await jobs.claim_tick("p", 10) and not await jobs.claim_tick("p", 10)
        assert not await jobs.claim_tick("p", 9)  # An older tick, from a late runner.
        assert await jobs.claim_tick("p", 11) and await jobs.claim_tick("q", 10)
        assert await jobs.runners_alive(within=5.0) == 0
        runner = await jobs.register_runner()
        assert await jobs.runners_alive(within=5.0) == 1
        await asyncio.sleep(0.3)
        assert await jobs.runners_alive(within=0.2) == 0  # Its heartbeat is too old now...
        await jobs.beat(runner)
        assert await jobs.runners_alive(within=0.2) == 1  # ... and fresh again.
        await jobs.unregister_runner(runner, stale_after=3600.0)
        assert await jobs.runners_alive(within=5.0) == 0
    finally:
        await store.aclose()
