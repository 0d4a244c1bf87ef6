"""A category handler's own key-value data (JSON values), kept in the conversation database.

It satisfies `experts.category.HandlerStore` structurally; `threads` never imports `experts`.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from frontdesk.threads._records import check_id
from frontdesk.threads._tx import run_tx
from frontdesk.threads.errors import InvalidInput
from frontdesk.threads.models import HandlerData, utcnow

_data = HandlerData.__table__  # type: ignore[attr-defined]


class HandlerStore:
    """JSON values under string keys, scoped to one namespace (usually a category name)."""

    def __init__(self, engine: AsyncEngine, namespace: str) -> None:
        self._engine = engine
        self.namespace = namespace

    async def get(self, key: str, default: Any = None) -> Any:
        """The value under `key`, or `default` when there is none."""

        async def work(conn: AsyncConnection) -> Any:
            stmt = sa.select(_data.c.value).where(
                _data.c.namespace == self.namespace, _data.c.key == key
            )
            row = (await conn.execute(stmt)).first()
            return default if row is None else row[0]

        return await run_tx(self._engine, work, readonly=True)

    async def put(self, key: str, value: Any) -> None:
        """Store `value` (anything `json.dumps` accepts) under `key`, replacing any old value.

        Raises:
            InvalidInput: the value is not JSON-serialisable.
        """
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise InvalidInput(f"handler data for {key!r} must be JSON-serialisable: {e}") from e

        async def work(conn: AsyncConnection) -> None:
            insert: Any = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert
            stmt = insert(_data).values(
                namespace=self.namespace, key=key, value=value, updated_at=utcnow()
            )
            stmt = stmt.on_conflict_do_update(
                index_elements=[_data.c.namespace, _data.c.key],
                set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at},
            )
            await conn.execute(stmt)

        await run_tx(self._engine, work)

    async def items(self, prefix: str = "") -> list[tuple[str, Any]]:
        """Every `(key, value)` whose key starts with `prefix` (case-sensitive), sorted by key."""

        async def work(conn: AsyncConnection) -> list[tuple[str, Any]]:
            # substr, not LIKE: SQLite's LIKE ignores ASCII case and PostgreSQL's does not.
            stmt = sa.select(_data.c.key, _data.c.value).where(
                _data.c.namespace == self.namespace,
                sa.func.substr(_data.c.key, 1, len(prefix)) == prefix,
            )
            # Sorted here, not by the database, whose collation may differ between backends.
            return sorted((row[0], row[1]) for row in await conn.execute(stmt))

        return await run_tx(self._engine, work, readonly=True)

    def shared(self, namespace: str) -> HandlerStore:
        """The store of another namespace in the same database.

        A category's store is its own; data several categories use (a shop's orders, which
        one category places and others look up or refund) lives in a namespace they share.
        """
        check_id(namespace, "namespace")
        return HandlerStore(self._engine, namespace)
