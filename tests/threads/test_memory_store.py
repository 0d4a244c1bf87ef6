"""The memory store: supersession by key, full-text ranking, and forgetting that leaves no text."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import closing
from pathlib import Path

import pytest
import sqlalchemy as sa

from frontdesk.errors import InvalidInput, MemoryNotFound
from frontdesk.threads.memory import FullTextRetriever, MemoryStore, query_words
from frontdesk.threads.store import ConversationStore
from tests._pg import create_database, drop_database

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    url = f"sqlite:///{tmp_path / 'memory.db'}"
    if request.param == "postgresql":
        url = create_database()
    conversations = await ConversationStore.open(url)
    try:
        yield MemoryStore(conversations.engine)
    finally:
        await conversations.aclose()
        if request.param == "postgresql":
            drop_database(url)


async def test_a_newer_fact_with_the_same_key_supersedes_the_older(store: MemoryStore) -> None:
    pune, _ = await store.add("u", "Lives in Pune", key="Home City")
    mumbai, superseded = await store.add("u", "Lives in  Mumbai", key="home_city")
    assert superseded == [pune.id]
    assert mumbai.key == "home_city" and mumbai.text == "Lives in Mumbai"
    assert [m.text for m in await store.current("u")] == ["Lives in Mumbai"]
    again, none = await store.add("u", "lives in mumbai", key="home_city")
    assert again.id == mumbai.id and none == []  # Said again: refreshed, not copied.


async def test_retrieval_ranks_matching_facts_first_then_the_newest(store: MemoryStore) -> None:
    for text in ("Allergic to peanuts", "Lives in Pune", "Prefers replies in Hindi"):
        await store.add("u", text)
    await store.add("other", "Allergic to peanuts and shellfish")
    retriever = FullTextRetriever(store)
    found = await retriever.retrieve("u", "Any recipes with peanut butter?", limit=10)
    assert [m.text for m in found] == [
        "Allergic to peanuts",
        "Prefers replies in Hindi",
        "Lives in Pune",
    ]
    assert [m.text for m in await retriever.retrieve("u", "hello", limit=2)] == [
        "Prefers replies in Hindi",
        "Lives in Pune",
    ]
    assert await retriever.retrieve("nobody", "peanuts", limit=5) == []


def test_query_words_drop_stop_words_and_punctuation() -> None:
    assert query_words('I\'m "allergic" to PEANUTS; OR NOT*') == ["allergic", "peanuts"]


async def test_bad_facts_are_refused(store: MemoryStore) -> None:
    with pytest.raises(InvalidInput):
        await store.add("u", "   ")
    with pytest.raises(InvalidInput):
        await store.add("u", "x" * 501)
    with pytest.raises(InvalidInput):
        await store.add("u", "fine", source="robot")  # type: ignore[arg-type]


async def test_forget_deletes_the_fact_and_its_older_versions(store: MemoryStore) -> None:
    pune, _ = await store.add("u", "Lives in Pune", key="home_city")
    mumbai, _ = await store.add("u", "Lives in Mumbai", key="home_city")
    with pytest.raises(MemoryNotFound):
        await store.forget("u", pune.id)  # Superseded: not a current fact.
    with pytest.raises(MemoryNotFound):
        await store.forget("v", mumbai.id)
    assert sorted(await store.forget("u", mumbai.id)) == sorted([mumbai.id, pune.id])
    async with store.engine.connect() as conn:
        left = (await conn.execute(sa.text("SELECT count(*) FROM memory"))).scalar_one()
    assert left == 0


def _checkpoint(path: Path) -> bytes:
    """The database file and its WAL after a full checkpoint, lower-cased."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = path.with_name(path.name + "-wal")
    return path.read_bytes().lower() + (wal.read_bytes().lower() if wal.exists() else b"")


async def test_a_forgotten_facts_text_is_gone_from_the_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "forget.db"
    conversations = await ConversationStore.open(f"sqlite:///{path}")
    store = MemoryStore(conversations.engine)
    try:
        for i in range(30):  # Enough rows and index segments that pages are reused.
            await store.add("u", f"Owns {i} bicycles")
        secret, _ = await store.add("u", "Keeps a parrot called Zanzibarquokka")
        found = await FullTextRetriever(store).retrieve("u", "zanzibarquokka", limit=1)
        assert [m.id for m in found] == [secret.id]
        await conversations.aclose()
        assert b"anzibarquokka" in _checkpoint(path)  # It was there, text and index.
        conversations = await ConversationStore.open(f"sqlite:///{path}")
        store = MemoryStore(conversations.engine)
        await store.forget("u", secret.id)
        after = await FullTextRetriever(store).retrieve("u", "zanzibarquokka parrot", limit=50)
        assert secret.id not in {m.id for m in after} and len(after) == 30
    finally:
        await conversations.aclose()
    raw = _checkpoint(path)
    assert b"anzibarquokka" not in raw
    assert b"parrot" not in raw
    assert b"bicycles" in raw  # The other facts (and their index) are still there.
