"""Fixtures of the store tests: every store test runs on a SQLite file (WAL) and on PostgreSQL.

On PostgreSQL they share the session's database (tests/conftest.py), each with its own
conversations; a test that needs an empty database asks for `fresh_pg_url`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from frontdesk.threads.store import ConversationStore


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


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[ConversationStore]:
    """A store on a SQLite file (for what exists on SQLite only: its writer and reader)."""
    opened = await ConversationStore.open(f"sqlite:///{tmp_path / 'frontdesk.db'}")
    try:
        yield opened
    finally:
        await opened.aclose()
