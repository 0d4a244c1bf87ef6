"""Erasure requests, and the SQLite runners' periodic ticks and heartbeats (docs/jobs.md).

Both databases: `erasure_request`, one row per request to erase a user, written with the
erasure's job in one transaction, so a crash mid-erasure is finished by the job runner;
its `user_id` is emptied when the erasure is done (the row keeps the counts).

SQLite only (on PostgreSQL, Procrastinate keeps both): `job_periodic`, the last tick of
each periodic job that one runner claimed (so a periodic job marked exclusive runs once
per period across processes), and `job_worker`, the heartbeats of `frontdesk worker`
processes (so a wait for work another process owns knows whether anyone runs it).

Revision ID: 0019_jobs_more
Revises: 0014_audit_blobs
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_jobs_more"
down_revision: str | Sequence[str] | None = "0018_keyed_refs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """`erasure_request` on both; `job_periodic` and `job_worker` on SQLite."""
    op.create_table(
        "erasure_request",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("user_id", sa.Text(), nullable=True),
        sa.Column("requested_by", sa.Text(), nullable=True),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("counts", sa.JSON(), nullable=True),
    )
    if op.get_bind().dialect.name == "postgresql":
        return
    op.create_table(
        "job_periodic",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("tick", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "job_worker",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("heartbeat", sa.Float(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    """Drop what `upgrade` made."""
    op.drop_table("erasure_request")
    if op.get_bind().dialect.name != "postgresql":
        op.drop_table("job_periodic")
        op.drop_table("job_worker")
