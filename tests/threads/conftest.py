"""Fixtures of the store tests: every store test runs on a SQLite file (WAL) and on PostgreSQL.

On PostgreSQL they share the session's database (tests/conftest.py), each with its own
conversations; a test that needs an empty database asks for `fresh_pg_url`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from frontdesk.threads.store import ConversationStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a store database: a SQLite file, or the session's PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'frontdesk.db'}"
    return str(request.getfixturevalue("session_pg_url"))


@asynccontextmanager
async def opened_store(url: str) -> AsyncIterator[ConversationStore]:
    """A store open on `url` for the block, closed after it."""
    opened = await ConversationStore.open(url)
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[ConversationStore]:
    """An open store on each backend."""
    async with opened_store(store_url) as opened:
        yield opened


@pytest.fixture
async def other_store(store_url: str) -> AsyncIterator[ConversationStore]:
    """A second store on `store`'s database: another process, with caches of its own."""
    async with opened_store(store_url) as opened:
        yield opened


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[ConversationStore]:
    """A store on a SQLite file (for what exists on SQLite only: its writer and reader)."""
    opened = await ConversationStore.open(f"sqlite:///{tmp_path / 'frontdesk.db'}")
    try:
        yield opened
    finally:
        await opened.aclose()
