"""`frontdesk worker` and `frontdesk jobs`: run the background jobs, see and mend them.

docs/jobs.md says what the jobs are; these commands are the ops side of it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from frontdesk.cli._options import (
    DbOption,
    JsonOption,
    RetentionOption,
    RetentionTranscriptsOption,
    app_option,
    db_url,
    existing_db,
)
from frontdesk.devkit.app import DEFAULT_APP, load_app
from frontdesk.errors import ConfigError
from frontdesk.jobs.runner import DEFAULT_CONCURRENCY, SHUTDOWN_GRACE
from frontdesk.jobs.store import JobRow, JobStore
from frontdesk.orchestrator.erasure import retention_policy
from frontdesk.threads.store import ConversationStore

app = typer.Typer(help="jobs commands", invoke_without_command=True)

AppOption = Annotated[str, app_option("module:attr naming the Orchestrator whose jobs to run.")]


def worker(
    concurrency: Annotated[
        int, typer.Option("--concurrency", help="Jobs this worker runs at once.")
    ] = DEFAULT_CONCURRENCY,
    db: DbOption = None,
    app_spec: AppOption = DEFAULT_APP,
    grace: Annotated[
        float,
        typer.Option("--grace", help="Seconds running jobs may finish after SIGTERM."),
    ] = SHUTDOWN_GRACE,
    retention: RetentionOption = None,
    retention_transcripts: RetentionTranscriptsOption = False,
) -> None:
    """Run the background jobs (memory learning, compaction, hand-off timeouts, erasures,
    retention with --retention) until SIGTERM or Ctrl-C, then stop gracefully: running
    jobs get --grace seconds to finish, the rest are given back to be retried. Run several,
    on several hosts (PostgreSQL), with `frontdesk serve --jobs worker`."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency {concurrency}: at least 1")
    if grace < 0:
        raise ConfigError(f"--grace {grace}: 0 or more seconds")
    url = db_url(db)
    orch = load_app(app_spec, db=url)
    orch.use_store(url)
    orch.use_jobs("worker")  # This process runs them in the foreground, below.
    if retention is not None:
        orch.use_retention(retention_policy(retention, transcripts=retention_transcripts))
    orch.job_concurrency = concurrency

    async def run() -> None:
        await orch.open()
        try:
            jobs = orch.jobs
            jobs.concurrency, jobs.grace = concurrency, grace
            Console(stderr=True).print(
                f"frontdesk worker: {len(jobs.kinds)} job kinds, {len(jobs.periodic)} periodic,"
                f" concurrency {concurrency}; stop with SIGTERM or Ctrl-C"
            )
            await jobs.run_worker()
        finally:
            await orch.aclose()

    asyncio.run(run())


async def _with_jobs(url: str) -> tuple[ConversationStore, JobStore]:
    store = await ConversationStore.open(url)
    return store, JobStore(store.engine)


async def _list(url: str, failed: bool) -> list[JobRow]:
    store, jobs = await _with_jobs(url)
    try:
        return await jobs.list(failed_only=failed)
    finally:
        await store.aclose()


@app.callback()
def jobs(
    ctx: typer.Context,
    failed: Annotated[bool, typer.Option("--failed", help="Only the failed jobs.")] = False,
    as_json: JsonOption = False,
    db: DbOption = None,
) -> None:
    """List the pending, running and failed background jobs (kind, key, attempts, last
    error); `retry ID` and `cancel ID` mend them."""
    if ctx.invoked_subcommand is not None:
        return
    rows = asyncio.run(_list(existing_db(db), failed))
    if as_json:
        typer.echo(json.dumps([r.as_json() for r in rows], indent=2))
        return
    if not rows:
        typer.echo("no failed jobs" if failed else "no pending, running or failed jobs")
        return
    table = Table("id", "kind", "status", "attempts", "key", "last error")
    for r in rows:
        table.add_row(
            str(r.id), r.kind, r.status, str(r.attempts), r.lock or "", r.last_error or ""
        )
    Console().print(table)


async def _mend(url: str, job_id: int, retry: bool) -> bool:
    store, jobs = await _with_jobs(url)
    try:
        return await (jobs.retry(job_id) if retry else jobs.cancel(job_id))
    finally:
        await store.aclose()


@app.command("retry")
def retry(
    job_id: Annotated[int, typer.Argument(help="The job's id (`frontdesk jobs`).")],
    db: DbOption = None,
) -> None:
    """Run a failed or cancelled job again, at once."""
    if not asyncio.run(_mend(existing_db(db), job_id, retry=True)):
        raise ConfigError(f"job {job_id} is not failed or cancelled; see `frontdesk jobs`")
    typer.echo(f"job {job_id} will run again")


@app.command("cancel")
def cancel(
    job_id: Annotated[int, typer.Argument(help="The job's id (`frontdesk jobs`).")],
    db: DbOption = None,
) -> None:
    """Cancel a job still waiting to run (a running one finishes)."""
    if not asyncio.run(_mend(existing_db(db), job_id, retry=False)):
        raise ConfigError(f"job {job_id} is not waiting to run; see `frontdesk jobs`")
    typer.echo(f"job {job_id} cancelled")
