"""Alembic environment of frontdesk: run with the connection `frontdesk.schema` hands over.

Migrations run only through `frontdesk.schema` (`frontdesk db upgrade`, or the automatic
initialisation of an empty database), which passes an open connection in
`config.attributes["connection"]` inside a transaction that holds the schema lock.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("frontdesk migrations run through `frontdesk db upgrade`, not `alembic`")

context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
