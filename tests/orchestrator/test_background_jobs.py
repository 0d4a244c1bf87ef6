"""The orchestrator's background work as durable jobs, on SQLite and PostgreSQL: a fact said
before the process went away is learned by the next one with no new message; a hand-off
times out with nobody writing; `drain()`; `aclose()`; `frontdesk jobs`."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frontdesk.cli import app as cli
from frontdesk.jobs.runner import DrainTimeout
from frontdesk.orchestrator import Orchestrator
from frontdesk.threads.handoff import DEFAULT_TIMEOUT_MESSAGE, HandoffStore
from tests._pg import create_database, drop_database
from tests.orchestrator import _jobs_worker as shop

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'frontdesk.db'}"
        return
    made = create_database()
    try:
        yield made
    finally:
        drop_database(made)


async def _facts(orch: Orchestrator, user: str) -> list[str]:
    return [m.text for m in await orch.memories(user)]


async def until(check: Callable[[], Awaitable[bool]], within: float) -> float:
    """Seconds until `check()` holds, looked at every 50 ms (fails past `within`)."""
    began = time.monotonic()
    for _ in range(int(within / 0.05)):
        if await check():
            return time.monotonic() - began
        await asyncio.sleep(0.05)
    raise AssertionError(f"not within {within} s")


async def test_a_fact_left_to_learn_is_learned_by_the_next_orchestrator_without_a_message(
    url: str,
) -> None:
    first = shop.app(store=url, jobs="worker")  # Records the job, runs none (no worker).
    await first.handle("c-1", shop.FACT_TEXT, user_id="u-1")
    await first.aclose()  # Returns at once: the job is durable, a worker's to run.
    assert await _facts(first, "u-1") == []

    second = shop.app(store=url)  # Inline: its runner finds the job.
    await second.open()

    async def learned() -> bool:
        return "Lives in Mumbai" in await _facts(second, "u-1")

    assert await until(learned, 10) < 10
    await second.drain(timeout=5)  # Its job then ends (succeeded: not listed).
    assert await second.jobs.list() == []
    await second.aclose()


async def test_drain_returns_after_the_background_work_and_close_is_instant(url: str) -> None:
    orch = shop.app(store=url)
    await orch.handle("c-1", shop.FACT_TEXT, user_id="u-1")
    await orch.drain(timeout=30)
    assert await _facts(orch, "u-1") == ["Lives in Mumbai"]
    began = time.monotonic()
    await orch.drain()
    await orch.aclose()
    assert time.monotonic() - began < 1.0  # Nothing pending: no wait.


async def test_drain_says_how_many_jobs_are_left_when_it_times_out(url: str) -> None:
    orch = shop.app(store=url, jobs="worker")
    await orch.handle("c-1", shop.FACT_TEXT, user_id="u-1")
    with pytest.raises(DrainTimeout) as caught:
        await orch.drain(timeout=0.3)
    assert caught.value.left == 1 and isinstance(caught.value, TimeoutError)
    await orch.aclose()


async def test_a_hand_off_left_alone_is_handed_back_by_the_bot_with_no_message(
    url: str,
) -> None:
    orch = shop.app(store=url, handoff_timeout=3)
    await orch.handle("c-1", "hello", user_id="u-1")
    await orch.hand_off("c-1", "the customer asked for a person")
    await orch.handle("c-1", "is anyone there?", user_id="u-1")  # Now waiting for a person.
    handoffs = HandoffStore(orch.store.engine)

    async def handed_back() -> bool:
        return await handoffs.current("c-1") is None

    waited = await until(handed_back, 8)  # No call to handle, nor to handoffs().
    transcript = await orch.transcript("c-1", user_id="u-1")
    assert transcript[-1].role == "assistant"
    assert transcript[-1].content == DEFAULT_TIMEOUT_MESSAGE
    assert orch.audit_log is not None
    kinds = [e.kind for e in await orch.audit_log.events("c-1")]
    assert kinds[-2:] == ["handoff_timeout", "hand_back"]
    assert 2.0 < waited < 8
    await orch.aclose()


def test_frontdesk_jobs_lists_a_failed_job_and_mends_it(url: str, tmp_path: Path) -> None:
    async def fail_one() -> int:
        orch = shop.app(store=url, jobs="worker")
        await orch.handle("c-1", shop.FACT_TEXT, user_id="u-1")
        await orch.open()
        (job,) = await orch.jobs.list()
        # What a worker does after the last of its attempts: failed, with its last error.
        from frontdesk.jobs import store as rows

        def failed(conn: object) -> None:
            table = "job"
            if orch.store.engine.dialect.name == "postgresql":
                table = "procrastinate_jobs"
            conn.exec_driver_sql(  # type: ignore[attr-defined]
                f"UPDATE {table} SET status = 'failed', attempts = 3 WHERE id = {job.id}"
            )
            rows.record_error(conn, job.id, "ModelAPIError: provider down")  # type: ignore[arg-type]

        from frontdesk.db import run_write

        await run_write(orch.store.engine, failed)
        await orch.aclose()
        return job.id

    job_id = asyncio.run(fail_one())
    runner = CliRunner()
    listed = runner.invoke(cli, ["jobs", "--json", "--db", url])
    assert listed.exit_code == 0, listed.output
    (item,) = json.loads(listed.stdout)
    assert item["id"] == job_id and item["kind"] == "memory.learn"
    assert item["status"] == "failed" and item["attempts"] == 3
    assert item["last_error"] == "ModelAPIError: provider down"
    assert "Mumbai" not in listed.stdout  # Ids only, never what the user wrote.
    failed = runner.invoke(cli, ["jobs", "--failed", "--db", url])
    assert failed.exit_code == 0 and "memory.learn" in failed.stdout
    assert runner.invoke(cli, ["jobs", "cancel", str(job_id), "--db", url]).exit_code == 2
    retried = runner.invoke(cli, ["jobs", "retry", str(job_id), "--db", url])
    assert retried.exit_code == 0, retried.output
    (again,) = json.loads(runner.invoke(cli, ["jobs", "--json", "--db", url]).stdout)
    assert again["status"] == "todo"
    assert runner.invoke(cli, ["jobs", "cancel", str(job_id), "--db", url]).exit_code == 0
    assert json.loads(runner.invoke(cli, ["jobs", "--json", "--db", url]).stdout) == []


def test_serve_jobs_worker_leaves_the_jobs_to_frontdesk_worker(tmp_path: Path) -> None:
    from frontdesk.errors import ConfigError
    from frontdesk.service._factory import ServiceSettings

    env = {
        "FRONTDESK_SERVE_APP": "tests.orchestrator._jobs_worker:app",
        "FRONTDESK_SERVE_DB": f"sqlite:///{tmp_path / 'frontdesk.db'}",
        "FRONTDESK_JWT_SECRET": "x" * 32,
    }
    assert ServiceSettings.from_env(env).orchestrator().jobs_mode == "inline"
    worker = ServiceSettings.from_env({**env, "FRONTDESK_SERVE_JOBS": "worker"})
    assert worker.orchestrator().jobs_mode == "worker"
    with pytest.raises(ConfigError, match="inline"):
        ServiceSettings.from_env({**env, "FRONTDESK_SERVE_JOBS": "later"}).orchestrator()
