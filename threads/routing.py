"""The SQL of the router's category vectors (table `category_vector`, revision
`0034_category_vectors`).

An `EmbeddingRouter` embeds each category's description and examples once per embedder:
the vectors are kept by the embedder's name and the text's sha256, read when a process
first routes a message, and only texts without a vector (a new or changed example) are
embedded and added. A plain turn never reads this table.
"""

from __future__ import annotations

import array
from collections.abc import Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver.tx import run_sync_tx
from frontdesk.threads.models import UTCDateTime, utcnow

__all__ = ["CategoryVectors", "table"]

table = sa.Table(
    "category_vector",
    sa.MetaData(),
    sa.Column("embedder", sa.String(255), primary_key=True),
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("dimensions", sa.Integer, nullable=False),
    sa.Column("vector", sa.LargeBinary, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

_CHUNK = 500
"""Hashes in one `IN (...)` list (SQLite's variable limit is far above; PostgreSQL's plan
stays simple)."""


class CategoryVectors:
    """The kept vectors of one database."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def read(self, embedder: str, keys: Sequence[str]) -> dict[str, list[float]]:
        """The kept vectors of `embedder` among the text hashes `keys`, by hash."""

        def work(conn: Connection) -> dict[str, list[float]]:
            found: dict[str, list[float]] = {}
            for start in range(0, len(keys), _CHUNK):
                rows = conn.execute(
                    sa.select(table.c.sha256, table.c.vector).where(
                        table.c.embedder == embedder,
                        table.c.sha256.in_(list(keys[start : start + _CHUNK])),
                    )
                )
                for sha, blob in rows:
                    vector = array.array("f")
                    vector.frombytes(blob)
                    found[str(sha)] = vector.tolist()
            return found

        return await run_sync_tx(self.engine, work, readonly=True)

    async def save(self, embedder: str, vectors: Mapping[str, Sequence[float]]) -> None:
        """Keep `embedder`'s vectors by text hash (one already kept, by another process
        that got there first, is left as it is: the same text has the same vector)."""
        if not vectors:
            return

        def work(conn: Connection) -> None:
            now = utcnow()
            rows = [
                {
                    "embedder": embedder,
                    "sha256": sha,
                    "dimensions": len(vector),
                    "vector": array.array("f", vector).tobytes(),
                    "created_at": now,
                }
                for sha, vector in vectors.items()
            ]
            insert = postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert
            conn.execute(insert(table).on_conflict_do_nothing(), rows)

        await run_sync_tx(self.engine, work)
