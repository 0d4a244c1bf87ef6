"""Schema migrations: an empty database is initialised, an old one is refused until upgraded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from frontdesk.db import create_engine
from frontdesk.orchestrator.cli import app
from frontdesk.schema import (
    SchemaOutdated,
    current_revisions,
    ensure_schema,
    head_revisions,
    upgrade_schema,
)
from frontdesk.threads.errors import SchemaOutdated as ThreadsSchemaOutdated
from frontdesk.threads.store import ConversationStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind (PostgreSQL: `fresh_pg_url`)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'frontdesk.db'}"
        return
    yield str(request.getfixturevalue("fresh_pg_url"))


async def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            return set(await conn.run_sync(lambda c: sa.inspect(c).get_table_names()))
    finally:
        await engine.dispose()


async def _stamp_base(url: str) -> None:
    """An old database: migrated, then taken back to base (an empty version table)."""
    engine = create_engine(url)
    try:
        await upgrade_schema(engine, "head")
        await upgrade_schema_down(engine)
    finally:
        await engine.dispose()


async def upgrade_schema_down(engine: AsyncEngine) -> None:
    from alembic import command

    from frontdesk.schema import alembic_config

    def down(conn: sa.Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.downgrade(config, "base")

    async with engine.begin() as conn:
        await conn.run_sync(down)


@pytest.mark.anyio
async def test_an_empty_database_is_initialised_on_first_use(empty_url: str) -> None:
    store = await ConversationStore.open(empty_url)
    try:
        user, _ = await store.add_user_message("conv-1", "hello")
        assert await current_revisions(store.engine) == tuple(sorted(head_revisions()))
    finally:
        await store.aclose()
    assert {"conversation", "message", "lease", "handler_data"} <= await _tables(empty_url)


@pytest.mark.anyio
async def test_several_stores_opening_an_empty_database_at_once(empty_url: str) -> None:
    stores = await asyncio.gather(*(ConversationStore.open(empty_url) for _ in range(4)))
    for store in stores:
        await store.aclose()
    engine = create_engine(empty_url)
    try:
        assert await current_revisions(engine) == tuple(sorted(head_revisions()))
    finally:
        await engine.dispose()


@pytest.mark.anyio
async def test_an_old_schema_is_refused_naming_the_command(empty_url: str) -> None:
    await _stamp_base(empty_url)

    with pytest.raises(SchemaOutdated, match="frontdesk db upgrade") as caught:
        await ConversationStore.open(empty_url)

    assert isinstance(caught.value, ThreadsSchemaOutdated)
    assert "conversation" not in await _tables(empty_url)


@pytest.mark.anyio
async def test_tables_without_a_version_are_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'foreign.db'}"
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE message (id TEXT)"))
        with pytest.raises(SchemaOutdated, match="frontdesk db upgrade"):
            await ensure_schema(engine)
    finally:
        await engine.dispose()


def test_db_upgrade_brings_an_old_database_to_head(empty_url: str) -> None:
    asyncio.run(_stamp_base(empty_url))
    runner = CliRunner()

    result = runner.invoke(app, ["db", "upgrade", "--db", empty_url])

    assert result.exit_code == 0, result.output
    assert "upgraded base -> " in result.output and head_revisions()[0] in result.output

    async def use() -> list[str]:
        store = await ConversationStore.open(empty_url)
        try:
            user, _ = await store.add_user_message("conv-1", "after the upgrade")
            return [m.content for m in await store.messages("conv-1")]
        finally:
            await store.aclose()

    assert asyncio.run(use()) == ["after the upgrade"]
    again = runner.invoke(app, ["db", "upgrade", "--db", empty_url])
    assert again.exit_code == 0 and "already at" in again.output


def test_db_upgrade_reports_a_bad_url() -> None:
    result = CliRunner().invoke(app, ["db", "upgrade", "--db", "mysql://x@y/z"])
    assert result.exit_code == 2
    assert "postgresql" in result.output


@pytest.mark.anyio
async def test_0006_gives_leases_a_fencing_token_and_keeps_held_ones(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, "0004_summary_covered_messages")
        async with engine.begin() as conn:
            await conn.execute(
                sa.text("INSERT INTO lease (name, owner, expires_at) VALUES ('held', 'old', 1)")
            )
        await upgrade_schema(engine, "head")
        async with engine.connect() as conn:
            token = (await conn.execute(sa.text("SELECT token FROM lease"))).scalar_one()
        assert token == 0
    finally:
        await engine.dispose()
    store = await ConversationStore.open(empty_url)
    try:
        lease = store.turn_lease("c")
        await lease.take()
        assert lease.token == 1  # A new conversation's first holder.
        await lease.aclose()
        assert await store.try_lease("held", "new", ttl=1)  # The expired old lease is taken.
    finally:
        await store.aclose()


async def _downgrade_to(url: str, revision: str) -> None:
    from alembic import command

    from frontdesk.schema import alembic_config

    def down(conn: sa.Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = conn
        command.downgrade(config, revision)

    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(down)
    finally:
        await engine.dispose()


def test_turn_outcomes_upgrade_keeps_the_messages_stored_before(empty_url: str) -> None:
    async def before() -> str:
        store = await ConversationStore.open(empty_url)
        try:
            user, _ = await store.add_user_message("conv-1", "stored at 0004")
            await store.add_assistant_message(user.id, "a reply")
            return user.id
        finally:
            await store.aclose()

    async def after(user_id: str) -> tuple[list[str], set[str], bool]:
        engine = create_engine(empty_url)
        try:
            await upgrade_schema(engine, "head")
        finally:
            await engine.dispose()
        store = await ConversationStore.open(empty_url)
        try:
            kinds: list[str] = [m.kind for m in await store.messages("conv-1")]
            record = await store.turn_record(user_id)
            return kinds, await _tables(empty_url), record.reply is not None
        finally:
            await store.aclose()

    user_id = asyncio.run(before())
    asyncio.run(_downgrade_to(empty_url, "0004_summary_covered_messages"))
    assert "turn_outcome" not in asyncio.run(_tables(empty_url))
    kinds, tables, replied = asyncio.run(after(user_id))
    assert kinds == ["message", "message"] and "turn_outcome" in tables and replied


@pytest.mark.anyio
async def test_0008_adds_the_memory_table_and_its_full_text_index(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, "0007_audit_guard")
        await upgrade_schema(engine, "0008_memory")
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    "INSERT INTO memory (id, user_id, text, source, created_at, updated_at)"
                    " VALUES ('m1', 'u', 'Allergic to peanuts', 'user', :now, :now)"
                ),
                {"now": datetime.now(UTC)},
            )
            if conn.dialect.name == "postgresql":
                match = "SELECT id FROM memory WHERE tsv @@ to_tsquery('english', 'peanut')"
            else:
                match = (
                    "SELECT m.id FROM memory_fts JOIN memory m ON m.seq = memory_fts.rowid"
                    " WHERE memory_fts MATCH 'peanut'"
                )
            assert (await conn.execute(sa.text(match))).scalars().all() == ["m1"]
    finally:
        await engine.dispose()
    assert "memory" in await _tables(empty_url)
    await _downgrade_to(empty_url, "0007_audit_guard")
    tables = await _tables(empty_url)
    assert "memory" not in tables and "memory_fts" not in tables
