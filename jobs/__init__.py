"""The background jobs: their tables and SQL (`store`: recorded in the transaction of the
write that needs them, claimed under fenced leases, done once by an idempotency key) and
their runner (`runner`: the inline runner beside the application, the SQLite worker, and
Procrastinate on PostgreSQL). See docs/jobs.md.

The conversation store records a turn's jobs in the turn's own transaction, so this room
sits below `threads`: it imports only the package root (`frontdesk.db`, `frontdesk._driver`).
"""
