"""The scale benchmark's parts run at small sizes (the real sizes are not for `make test`)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg  # type: ignore[import-untyped]
import pytest

from benchmarks.scale import _dsn, fill, knowledge, memory, report


def test_knowledge_and_memory_lookups_are_timed_per_size(tmp_path: Path) -> None:
    @contextlib.asynccontextmanager
    async def url_for(name: str) -> AsyncIterator[str]:
        yield f"sqlite:///{tmp_path / name}.db"

    passages = asyncio.run(knowledge(url_for, [20, 200]))
    facts = asyncio.run(memory(url_for, [5, 50]))
    assert set(passages) == {20, 200} and set(facts) == {5, 50}
    assert all(ms > 0 for ms in [*passages.values(), *facts.values()])
    table = report({"knowledge": {"SQLite": passages}, "memory": {"SQLite": facts}})
    assert "| passage lookup | 200 | SQLite |" in table
    assert "| one user's recall | 50 | SQLite |" in table


@pytest.mark.postgres
def test_the_store_is_filled_in_sql_with_threads_a_turn_can_read(fresh_pg_url: str) -> None:
    from benchmarks.scale import _turn_ms

    async def run() -> tuple[int, int, list[float]]:
        await _turn_ms(fresh_pg_url, "schema", turns=1)  # The schema.
        await fill(fresh_pg_url, 2_000, batch=70)
        conn = await asyncpg.connect(_dsn(fresh_pg_url))
        try:
            messages = await conn.fetchval("SELECT count(*) FROM message WHERE id <> ''")
            chained = await conn.fetchval(
                "SELECT count(*) FROM message m JOIN message p ON p.id = m.parent_id"
            )
        finally:
            await conn.close()
        return messages, chained, await _turn_ms(fresh_pg_url, "after", turns=6)

    messages, chained, times = asyncio.run(run())
    assert messages == 2_000 + 2  # The generated ones, and the schema turn's two.
    assert chained == 1_800 + 1  # Each generated thread is a chain of 10.
    assert len(times) == 1


@pytest.mark.postgres
def test_a_kept_store_is_measured_again_without_generating_it() -> None:
    from sqlalchemy.engine import make_url

    from benchmarks.scale import store
    from tests._pg import PG_URL, drop_database

    name = f"fd_test_keep_{uuid.uuid4().hex[:12]}"
    kept = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    try:
        first = asyncio.run(store(PG_URL, 200, 1, keep=name))
        assert first["fill_s"] is not None and first["messages"] >= 200
        with pytest.raises(SystemExit, match="already exists"):
            asyncio.run(store(PG_URL, 200, 1, keep=name))
        again = asyncio.run(store(PG_URL, 200, 1, reuse=name))
        # Nothing generated: the kept messages, and the first run's own turns, are there.
        assert again["fill_s"] is None and again["messages"] > first["messages"]
        assert "reused" in report({"store": again})
    finally:
        drop_database(kept)
    with pytest.raises(SystemExit, match="no database"):
        asyncio.run(store(PG_URL, 200, 1, reuse=name))
