"""The database schema's version: initialise an empty database, refuse one that is behind.

Every table (threads, audit, summaries) is created by the one Alembic environment in
`frontdesk/migrations/`. The library runs on a database only when it is at the head
revision; an empty database is brought there on first use so that the embedded default
just works, and anything older is refused with a message naming `frontdesk db upgrade`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.resources import files

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from frontdesk.errors import SchemaAhead, SchemaOutdated

__all__ = [
    "SchemaAhead",
    "SchemaOutdated",
    "alembic_config",
    "current_revisions",
    "ensure_schema",
    "head_revisions",
    "upgrade_schema",
]

VERSION_TABLE = "alembic_version"
_PG_LOCK_KEY = 0x66726F6E74  # "front": one advisory lock for every schema change.
_ALEMBIC = threading.Lock()
"""Alembic's `context` and `op` are process-global proxies: two migrations running at once
in one process (two orchestrators opening on one event loop, or on two threads) would
overwrite each other's. One migration at a time per process; across processes the
database's own lock (advisory lock, BEGIN IMMEDIATE) serialises them."""


@asynccontextmanager
async def _one_migration_at_a_time() -> AsyncIterator[None]:
    """Hold `_ALEMBIC` without blocking the event loop while waiting for it."""
    if not _ALEMBIC.acquire(blocking=False):
        await asyncio.to_thread(_ALEMBIC.acquire)
    try:
        yield
    finally:
        _ALEMBIC.release()


def alembic_config() -> Config:
    """The Alembic configuration of frontdesk's migrations (no alembic.ini needed)."""
    config = Config()
    config.set_main_option("script_location", str(files("frontdesk") / "migrations"))
    return config


def head_revisions() -> tuple[str, ...]:
    """The head revision(s) of the migration scripts shipped with this code."""
    return tuple(ScriptDirectory.from_config(alembic_config()).get_heads())


async def current_revisions(engine: AsyncEngine) -> tuple[str, ...] | None:
    """The revisions the database is stamped with; `None` when it has no version table."""
    async with engine.connect() as conn:
        return await conn.run_sync(_current)


async def ensure_schema(engine: AsyncEngine) -> None:
    """Make sure the database is at the head revision before the library uses it.

    An empty database (no version table, no tables) is upgraded to head, under a lock so
    that several processes starting at once migrate it once.

    Raises:
        SchemaOutdated: the database is at an older revision, or holds tables that were not
            created by frontdesk's migrations.
        SchemaAhead: the database is at a revision this code does not know.
    """
    heads = head_revisions()
    if await current_revisions(engine) == heads:
        return
    async with _one_migration_at_a_time(), engine.begin() as conn:
        await _lock(conn)
        state = await conn.run_sync(_current)
        if state == heads:
            return
        if state is None and not await conn.run_sync(_has_tables):
            await conn.run_sync(_upgrade, "head")
            return
        _refuse(state, heads, engine)


async def upgrade_schema(engine: AsyncEngine, revision: str = "head") -> tuple[str, ...]:
    """Run the migrations up to `revision`; returns the revisions the database is at after.

    This is what `frontdesk db upgrade` calls.
    """
    async with _one_migration_at_a_time(), engine.begin() as conn:
        await _lock(conn)
        await conn.run_sync(_upgrade, revision)
        state = await conn.run_sync(_current)
    return state or ()


async def _lock(conn: AsyncConnection) -> None:
    # SQLite's BEGIN IMMEDIATE (see frontdesk.db) already serialises schema changes.
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})


def _current(conn: Connection) -> tuple[str, ...] | None:
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    context = MigrationContext.configure(conn)
    return tuple(sorted(context.get_current_heads()))


def _has_tables(conn: Connection) -> bool:
    return bool(inspect(conn).get_table_names())


def _upgrade(conn: Connection, revision: str) -> None:
    config = alembic_config()
    config.attributes["connection"] = conn
    command.upgrade(config, revision)


def _refuse(state: tuple[str, ...] | None, heads: tuple[str, ...], engine: AsyncEngine) -> None:
    url = engine.url.render_as_string(hide_password=True)
    known = {rev.revision for rev in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if state is not None and not set(state) <= known:
        raise SchemaAhead(
            f"the database {url} is at schema revision {', '.join(state)}, which this version "
            f"of frontdesk does not know (its head is {', '.join(heads)}); upgrade frontdesk"
        )
    at = ", ".join(state) if state else "no revision (tables not created by frontdesk)"
    if state == ():
        at = "base (empty version table)"
    raise SchemaOutdated(
        f"the database {url} has an outdated schema (at {at}; this code needs "
        f"{', '.join(heads)}); run `frontdesk db upgrade --db URL` to migrate it"
    )
