"""Fixtures of the store tests: every store test runs on a SQLite file (WAL) and on PostgreSQL.

PostgreSQL tests get a database of their own (created here, dropped afterwards), because
other tests use the same server; when the server is down they fail, never skip.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url

from frontdesk.threads.store import ConversationStore
from tests._pg import PG_URL


def _admin_dsn() -> str:
    return make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)


async def _create_database() -> str:
    name = f"fd_test_{uuid.uuid4().hex[:16]}"
    conn = await asyncpg.connect(_admin_dsn())
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


async def _drop_database(url: str) -> None:
    name = make_url(url).database
    conn = await asyncpg.connect(_admin_dsn())
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def create_pg_database() -> str:
    """A fresh, empty PostgreSQL database; returns its URL (asyncpg driver)."""
    return asyncio.run(_create_database())


def drop_pg_database(url: str) -> None:
    """Drop a database made by `create_pg_database`."""
    asyncio.run(_drop_database(url))


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """An empty PostgreSQL database for this test alone."""
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture(scope="session")
def session_pg_url() -> Iterator[str]:
    """A PostgreSQL database shared by the store tests (each test uses its own conversations)."""
    url = create_pg_database()
    try:
        yield url
    finally:
        drop_pg_database(url)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a store database: a SQLite file, or the session's PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'frontdesk.db'}"
    return str(request.getfixturevalue("session_pg_url"))


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[ConversationStore]:
    """An open store on each backend."""
    opened = await ConversationStore.open(store_url)
    try:
        yield opened
    finally:
        await opened.aclose()
