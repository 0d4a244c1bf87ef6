"""PostgreSQL: a job that ends wakes the workers for the next job of its lock.

Procrastinate wakes its workers (LISTEN/NOTIFY) when a job is inserted, never when one
ends. A job recorded while another of its lock runs (a conversation's next compaction,
recorded by a reply while the last one summarises) is fetched once, found locked, and then
waits for the workers' next poll: a second in frontdesk's worker. Meanwhile the path read
by every turn grew past the compaction threshold, and a PostgreSQL turn grew with the
conversation.

`frontdesk_wake_lock_waiters` runs when a `doing` job with a lock leaves `doing` (deleted
on success, finished, or given back to retry): if a `todo` job of the same lock is due,
it sends the notification Procrastinate's own insert trigger sends
(`procrastinate_notify_queue_job_inserted_v1`: `job_inserted` on the queue's channel and
on the any-queue channel). It is delivered at COMMIT, when the lock is free, so the worker
that fetches finds the job. Any worker of any process is woken, not only this one's.

SQLite needs nothing: its jobs run in process, and the runner looks again when one ends.

Revision ID: 0021_jobs_wake
Revises: 0020_audit_narrow
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0021_jobs_wake"
down_revision: str | Sequence[str] | None = "0020_audit_narrow"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FUNCTION = """
CREATE FUNCTION frontdesk_wake_lock_waiters() RETURNS trigger
    LANGUAGE plpgsql
AS $$
DECLARE
    waiting RECORD;
    payload TEXT;
BEGIN
    SELECT id, queue_name INTO waiting FROM procrastinate_jobs
    WHERE lock = OLD.lock AND status = 'todo'
      AND (scheduled_at IS NULL OR scheduled_at <= now())
    ORDER BY priority DESC, id ASC
    LIMIT 1;
    IF FOUND THEN
        payload := json_build_object('type', 'job_inserted', 'job_id', waiting.id)::text;
        PERFORM pg_notify('procrastinate_queue_v1#' || waiting.queue_name, payload);
        PERFORM pg_notify('procrastinate_any_queue_v1', payload);
    END IF;
    RETURN NULL;
END;
$$
"""

TRIGGERS = (
    "CREATE TRIGGER frontdesk_wake_lock_waiters_deleted AFTER DELETE ON procrastinate_jobs"
    " FOR EACH ROW WHEN (OLD.status = 'doing' AND OLD.lock IS NOT NULL)"
    " EXECUTE FUNCTION frontdesk_wake_lock_waiters()",
    "CREATE TRIGGER frontdesk_wake_lock_waiters_ended AFTER UPDATE OF status ON"
    " procrastinate_jobs FOR EACH ROW WHEN (OLD.status = 'doing' AND NEW.status <> 'doing'"
    " AND OLD.lock IS NOT NULL) EXECUTE FUNCTION frontdesk_wake_lock_waiters()",
)


def upgrade() -> None:
    """PostgreSQL: the function and its two triggers on `procrastinate_jobs`."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(FUNCTION)
    for trigger in TRIGGERS:
        op.execute(trigger)


def downgrade() -> None:
    """Drop the triggers and the function."""
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS frontdesk_wake_lock_waiters_ended ON procrastinate_jobs")
    op.execute("DROP TRIGGER IF EXISTS frontdesk_wake_lock_waiters_deleted ON procrastinate_jobs")
    op.execute("DROP FUNCTION IF EXISTS frontdesk_wake_lock_waiters()")
