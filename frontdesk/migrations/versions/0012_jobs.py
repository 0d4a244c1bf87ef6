"""Durable background jobs (docs/jobs.md): Procrastinate's schema on PostgreSQL, `job` on SQLite.

PostgreSQL: the job engine is Procrastinate; this revision applies the schema of the
installed Procrastinate (`procrastinate.schema.SchemaManager.get_schema()`, its tables
`procrastinate_*`, types and functions) so that `frontdesk db upgrade` sets up everything,
plus `job_error` (the last error of a job, which Procrastinate does not keep). A later
Procrastinate whose schema changes needs a new revision applying its migration files.

SQLite (one machine, jobs run in process): `job` holds the same fields as
`procrastinate_jobs` (queue, task, lock, queueing lock, args, status, scheduled time,
attempts) plus the lease of the run in progress and the last error.

Both: `job_done`, the idempotency keys of jobs whose effect is stored (written in the same
transaction as the effect, so a job run again after a crash changes nothing).

Revision ID: 0012_jobs
Revises: 0016_hardening
Create Date: 2026-12-01
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_jobs"
down_revision: str | Sequence[str] | None = "0016_hardening"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MISSING = (
    "frontdesk's jobs on PostgreSQL run on Procrastinate, which is not installed; "
    "install the extra: pip install 'frontdesk[jobs]', then run `frontdesk db upgrade` again"
)


def _procrastinate_schema() -> str:
    try:
        from procrastinate.schema import SchemaManager
    except ImportError as e:
        raise RuntimeError(MISSING) from e
    return str(SchemaManager.get_schema())


def _run_script(sql: str) -> None:
    """Run a multi-statement script (function bodies hold `;`) as one simple query."""
    adapted = op.get_bind().connection.dbapi_connection
    run_async = getattr(adapted, "run_async", None)
    if run_async is not None:  # asyncpg: without arguments, its simple query protocol.
        run_async(lambda driver: driver.execute(sql))
    else:
        op.get_bind().exec_driver_sql(sql.replace("%", "%%"))


def upgrade() -> None:
    """PostgreSQL: Procrastinate's schema and `job_error`; SQLite: the `job` table."""
    op.create_table(
        "job_done",
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=False),
    )
    if op.get_bind().dialect.name == "postgresql":
        _run_script(_procrastinate_schema())
        op.create_table(
            "job_error",
            sa.Column(
                "job_id",
                sa.BigInteger(),
                sa.ForeignKey("procrastinate_jobs.id", ondelete="CASCADE"),
                primary_key=True,
            ),
            sa.Column("error", sa.Text(), nullable=False),
            sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        )
        return
    op.create_table(
        "job",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("queue_name", sa.String(128), nullable=False),
        sa.Column("task_name", sa.String(128), nullable=False),
        sa.Column("lock", sa.Text(), nullable=True),
        sa.Column("queueing_lock", sa.Text(), nullable=True),
        sa.Column("args", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False, server_default="todo"),
        sa.Column("scheduled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default=sa.text("0")),
        sa.Column("leased_until", sa.Float(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_job_status_id", "job", ["status", "id"])
    op.create_index("ix_job_lock", "job", ["lock", "id"])
    op.create_index(
        "uq_job_queueing_lock",
        "job",
        ["queueing_lock"],
        unique=True,
        sqlite_where=sa.text("status = 'todo'"),
    )


def downgrade() -> None:
    """Drop what `upgrade` made (on PostgreSQL, every object of Procrastinate's schema)."""
    op.drop_table("job_done")
    if op.get_bind().dialect.name != "postgresql":
        op.drop_table("job")
        return
    op.drop_table("job_error")
    schema = _procrastinate_schema()
    for table in reversed(re.findall(r"CREATE TABLE (\w+)", schema)):
        op.execute(f"DROP TABLE IF EXISTS {table} CASCADE")
    for function in set(re.findall(r"CREATE (?:OR REPLACE )?FUNCTION (\w+)\(", schema)):
        op.execute(f"DROP FUNCTION IF EXISTS {function} CASCADE")
    for type_ in re.findall(r"CREATE TYPE (\w+)", schema):
        op.execute(f"DROP TYPE IF EXISTS {type_} CASCADE")
