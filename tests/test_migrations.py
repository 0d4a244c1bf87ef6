"""Schema migrations: an empty database is initialised, an old one is refused until upgraded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.db import create_engine
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


async def _edit_audit_rows(url: str, update: str, *, guard_back: bool = False) -> None:
    """Run `update` on `audit_event` past its append-only guard, as someone who owns the
    table would tamper with it: on PostgreSQL the trigger is disabled (enabled again with
    `guard_back`), on SQLite it is dropped (the migrations under test create it again)."""
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            postgresql = conn.dialect.name == "postgresql"
            if postgresql:
                await conn.execute(
                    sa.text("ALTER TABLE audit_event DISABLE TRIGGER audit_event_append_only")
                )
            else:
                await conn.execute(sa.text("DROP TRIGGER audit_event_no_update"))
            await conn.execute(sa.text(update))
            if postgresql and guard_back:
                await conn.execute(
                    sa.text("ALTER TABLE audit_event ENABLE TRIGGER audit_event_append_only")
                )
    finally:
        await engine.dispose()


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


def _before(revision: str) -> str:
    """The revision a migration is applied on (whatever the chain before it is)."""
    from alembic.script import ScriptDirectory

    from frontdesk.schema import alembic_config

    down = ScriptDirectory.from_config(alembic_config()).get_revision(revision).down_revision
    assert isinstance(down, str)
    return down


def test_handler_scopes_keep_the_data_stored_before_as_the_everyone_scope(
    empty_url: str,
) -> None:
    rows = [("ORDERS", "pending:c-1", {"bags": 2}), ("potato_shop", "order:10001", [1, "x"])]

    async def before() -> None:
        engine = create_engine(empty_url)
        try:
            await upgrade_schema(engine, _before("0009_handler_scopes"))
            insert = sa.text(
                "INSERT INTO handler_data (namespace, key, value, updated_at)"
                " VALUES (:n, :k, :v, CURRENT_TIMESTAMP)"
            ).bindparams(sa.bindparam("v", type_=sa.JSON()))
            async with engine.begin() as conn:
                for namespace, key, value in rows:
                    await conn.execute(insert, {"n": namespace, "k": key, "v": value})
            await upgrade_schema(engine, "head")
        finally:
            await engine.dispose()

    async def after() -> tuple[list[Any], list[Any], list[str]]:
        store = await ConversationStore.open(empty_url)
        try:
            kept = [await store.handler_store(n).get(k) for n, k, _ in rows]
            state = store.handler_state("ORDERS", conversation_id="c-1", user_id="ann")
            await state.conversation.put("pending:c-1", "mine")  # The same key, another scope.
            await state.user.put("pending:c-1", "ann's")
            scoped = [
                await state.everyone.get("pending:c-1"),
                await state.conversation.get("pending:c-1"),
                await state.user.get("pending:c-1"),
            ]
            async with store.engine.connect() as conn:
                key = await conn.run_sync(
                    lambda c: sa.inspect(c).get_pk_constraint("handler_data")["constrained_columns"]
                )
            return kept, scoped, key
        finally:
            await store.aclose()

    asyncio.run(before())
    kept, scoped, key = asyncio.run(after())
    assert kept == [value for _, _, value in rows]
    assert scoped == [{"bags": 2}, "mine", "ann's"]
    assert key == ["namespace", "scope", "scope_id", "key"]

    async def downgraded() -> list[tuple[str, str]]:
        engine = create_engine(empty_url)
        try:
            async with engine.connect() as conn:
                result = await conn.execute(sa.text("SELECT namespace, key FROM handler_data"))
                return sorted((r[0], r[1]) for r in result)
        finally:
            await engine.dispose()

    asyncio.run(_downgrade_to(empty_url, _before("0009_handler_scopes")))
    # Only the everyone rows have a place in the old key; the data of before is all there.
    assert asyncio.run(downgraded()) == sorted((n, k) for n, k, _ in rows)


def test_0011_handoff_gives_old_messages_an_author_and_adds_the_handoff_table(
    empty_url: str,
) -> None:
    async def before() -> None:
        store = await ConversationStore.open(empty_url)
        try:
            user, _ = await store.add_user_message("conv-1", "stored at 0007")
            await store.add_assistant_message(user.id, "a reply")
        finally:
            await store.aclose()

    async def after() -> tuple[list[tuple[str, str]], set[str]]:
        engine = create_engine(empty_url)
        try:
            await upgrade_schema(engine, "head")
        finally:
            await engine.dispose()
        store = await ConversationStore.open(empty_url)
        try:
            authors = [(str(m.role), m.author) for m in await store.messages("conv-1")]
            return authors, await _tables(empty_url)
        finally:
            await store.aclose()

    asyncio.run(before())
    asyncio.run(_downgrade_to(empty_url, _before("0011_handoff")))
    assert "handoff" not in asyncio.run(_tables(empty_url))
    authors, tables = asyncio.run(after())
    assert authors == [("user", "user"), ("assistant", "bot")] and "handoff" in tables


@pytest.mark.anyio
async def test_0010_adds_the_audit_data_keys_table_and_takes_it_back(empty_url: str) -> None:
    from frontdesk.audit.crypto import MasterKey
    from frontdesk.audit.store import AuditLog
    from tests.audit.conftest import turn_events

    key = MasterKey.generate()
    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, _before("0010_audit_keys"))
        assert "audit_key" not in await _tables(empty_url)
        await upgrade_schema(engine, "head")
    finally:
        await engine.dispose()
    assert "audit_key" in await _tables(empty_url)
    async with await AuditLog.open(empty_url, master_key=key) as log:
        await log.append("c", turn_events("t1"), user_id="u")
        assert (await log.verify("c")).ok
    engine = create_engine(empty_url)
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(sa.text("SELECT user_ref, period FROM audit_key"))).one()
        assert row.user_ref != "u" and len(row.period) == 7
    finally:
        await engine.dispose()
    await _downgrade_to(empty_url, _before("0010_audit_keys"))
    assert "audit_key" not in await _tables(empty_url)


@pytest.mark.anyio
async def test_0008_adds_the_memory_table_and_its_full_text_index(empty_url: str) -> None:
    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, _before("0008_memory"))
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
    await _downgrade_to(empty_url, _before("0008_memory"))
    tables = await _tables(empty_url)
    assert "memory" not in tables and "memory_fts" not in tables


def test_0015_desk_adds_the_claim_columns_and_takes_them_back(empty_url: str) -> None:
    async def columns() -> set[str]:
        engine = create_engine(empty_url)
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(
                    lambda c: {col["name"] for col in sa.inspect(c).get_columns("handoff")}
                )
        finally:
            await engine.dispose()

    async def upgrade_to(revision: str) -> None:
        engine = create_engine(empty_url)
        try:
            await upgrade_schema(engine, revision)
        finally:
            await engine.dispose()

    asyncio.run(upgrade_to("head"))
    assert {"claimed_by", "claimed_at"} <= asyncio.run(columns())
    asyncio.run(_downgrade_to(empty_url, _before("0015_desk")))
    assert not {"claimed_by", "claimed_at"} & asyncio.run(columns())
    asyncio.run(upgrade_to("head"))
    assert {"claimed_by", "claimed_at"} <= asyncio.run(columns())


@pytest.mark.anyio
async def test_0013_adds_knowledge_and_summary_memories_and_takes_them_back(
    empty_url: str,
) -> None:
    now = {"now": datetime.now(UTC)}
    memory_row = (
        "INSERT INTO memory (id, user_id, text, source, created_at, updated_at)"
        " VALUES (:id, 'u', :text, :source, :now, :now)"
    )
    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, _before("0013_knowledge"))
        async with engine.begin() as conn:  # A fact stored before keeps its index entry.
            await conn.execute(
                sa.text(memory_row),
                {"id": "m1", "text": "Allergic to peanuts", "source": "user", **now},
            )
        await upgrade_schema(engine, "0013_knowledge")
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(memory_row),
                {
                    "id": "m2",
                    "text": "Disputed a card payment",
                    "source": "conversation_summary",
                    **now,
                },
            )
            await conn.execute(
                sa.text(
                    "INSERT INTO knowledge_passage (id, source, position, title, text, version,"
                    " sha256, created_at, updated_at) VALUES ('p1', 'help/fees.md', 0,"
                    " 'Overdraft fees', 'An overdraft costs money', 1, 'h', :now, :now)"
                ),
                now,
            )
            if conn.dialect.name == "postgresql":
                facts = "SELECT id FROM memory WHERE tsv @@ to_tsquery('english', 'peanut')"
                passages = (
                    "SELECT id FROM knowledge_passage WHERE tsv @@ to_tsquery('english', 'fee')"
                )
            else:
                facts = (
                    "SELECT m.id FROM memory_fts JOIN memory m ON m.seq = memory_fts.rowid"
                    " WHERE memory_fts MATCH 'peanut'"
                )
                passages = (
                    "SELECT p.id FROM knowledge_fts JOIN knowledge_passage p"
                    " ON p.seq = knowledge_fts.rowid WHERE knowledge_fts MATCH 'fee'"
                )
            assert (await conn.execute(sa.text(facts))).scalars().all() == ["m1"]
            assert (await conn.execute(sa.text(passages))).scalars().all() == ["p1"]
        with pytest.raises(sa.exc.IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(
                    sa.text(memory_row), {"id": "m3", "text": "x", "source": "rumour", **now}
                )
    finally:
        await engine.dispose()
    assert "sources" in await _columns(empty_url, "turn_outcome")
    await _downgrade_to(empty_url, _before("0013_knowledge"))
    assert "sources" not in await _columns(empty_url, "turn_outcome")
    tables = await _tables(empty_url)
    assert not {"knowledge_passage", "knowledge_fts", "knowledge_embedding"} & tables
    engine = create_engine(empty_url)
    try:
        async with engine.connect() as conn:
            ids = (await conn.execute(sa.text("SELECT id FROM memory"))).scalars().all()
            assert ids == ["m1"]  # The summary is gone, the fact stays (and is found).
            if conn.dialect.name != "postgresql":
                found = await conn.execute(
                    sa.text("SELECT rowid FROM memory_fts WHERE memory_fts MATCH 'peanut'")
                )
                assert len(found.all()) == 1
    finally:
        await engine.dispose()


async def _columns(url: str, table: str) -> set[str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            columns = await conn.run_sync(lambda c: sa.inspect(c).get_columns(table))
            return {c["name"] for c in columns}
    finally:
        await engine.dispose()


def test_0016_moves_the_librarys_flags_out_of_outcome_data_and_back(empty_url: str) -> None:
    """Outcomes stored by older code with `{"handoff": true, "reason"}` and
    `{"error": "handler_failed"}` in `data` get the columns; a downgrade puts them back."""
    from frontdesk.threads.models import TurnOutcomeRow

    out = TurnOutcomeRow.__table__  # type: ignore[attr-defined]

    async def seed() -> None:
        store = await ConversationStore.open(empty_url)
        try:
            for cid in ("c-handoff", "c-failed"):
                await store.add_user_message(cid, "hello")
        finally:
            await store.aclose()
        await _downgrade_to(empty_url, "0011_handoff")
        engine = create_engine(empty_url)
        try:
            async with engine.begin() as conn:
                rows = (
                    await conn.execute(sa.text("SELECT id, conversation_id FROM message"))
                ).all()
                for message_id, cid in rows:
                    data = (
                        {"handoff": True, "reason": "asked for a person", "mine": 1}
                        if cid == "c-handoff"
                        else {"error": "handler_failed"}
                    )
                    await conn.execute(
                        sa.text(
                            "INSERT INTO turn_outcome (user_message_id, conversation_id, category,"
                            " instruction, data, handler_ran, usage, models, created_at)"
                            " VALUES (:m, :c, 'X', 'i', :d, false, '{}', '{}', :t)"
                        ),
                        {
                            "m": message_id,
                            "c": cid,
                            "d": json.dumps(data),
                            "t": datetime.now(UTC),
                        },
                    )
        finally:
            await engine.dispose()

    async def read() -> dict[str, tuple[Any, ...]]:
        engine = create_engine(empty_url)
        try:
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(
                        sa.select(
                            out.c.conversation_id, out.c.data, out.c.handoff, out.c.handler_failed
                        )
                    )
                ).all()
            return {r[0]: tuple(r[1:]) for r in rows}
        finally:
            await engine.dispose()

    async def migrate(revision: str) -> None:
        engine = create_engine(empty_url)
        try:
            await upgrade_schema(engine, revision)
        finally:
            await engine.dispose()

    asyncio.run(seed())
    asyncio.run(migrate("0016_hardening"))
    assert asyncio.run(read()) == {
        "c-handoff": ({"mine": 1}, "asked for a person", False),
        "c-failed": ({}, None, True),
    }
    asyncio.run(_downgrade_to(empty_url, "0011_handoff"))
    engine = create_engine(empty_url)

    async def raw() -> dict[str, Any]:
        try:
            async with engine.connect() as conn:
                rows = (
                    await conn.execute(sa.text("SELECT conversation_id, data FROM turn_outcome"))
                ).all()
            return {r[0]: r[1] if isinstance(r[1], dict) else json.loads(r[1]) for r in rows}
        finally:
            await engine.dispose()

    assert asyncio.run(raw()) == {
        "c-handoff": {"mine": 1, "handoff": True, "reason": "asked for a person"},
        "c-failed": {"error": "handler_failed"},
    }


def test_0012_jobs_sets_up_the_job_engine_and_takes_it_back(empty_url: str) -> None:
    """PostgreSQL: Procrastinate's schema (its defer function works) and `job_error`;
    SQLite: the `job` table. Downgrading leaves no object of either behind."""
    postgres = empty_url.startswith("postgresql")
    ours = {"procrastinate_jobs", "procrastinate_events", "job_error"} if postgres else {"job"}
    ours |= {"job_done"}

    async def up() -> None:
        engine = create_engine(empty_url)
        try:
            await upgrade_schema(engine, "head")
            if postgres:
                async with engine.begin() as conn:
                    deferred = await conn.execute(
                        sa.text(
                            "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW('q', 't', 0, NULL,"
                            " NULL, '{}'::jsonb, NULL)]::procrastinate_job_to_defer_v1[])"
                        )
                    )
                    assert len(deferred.scalar_one()) == 1
        finally:
            await engine.dispose()

    async def functions() -> int:
        engine = create_engine(empty_url)
        try:
            async with engine.connect() as conn:
                found = await conn.execute(
                    sa.text("SELECT count(*) FROM pg_proc WHERE proname LIKE 'procrastinate%'")
                )
                return int(found.scalar_one())
        finally:
            await engine.dispose()

    asyncio.run(up())
    assert ours <= asyncio.run(_tables(empty_url))
    asyncio.run(_downgrade_to(empty_url, _before("0012_jobs")))
    assert not ours & asyncio.run(_tables(empty_url))
    if postgres:
        assert asyncio.run(functions()) == 0
    asyncio.run(up())  # And up again, from the state it left.
    assert ours <= asyncio.run(_tables(empty_url))


def _refers(row: Any) -> bool:
    """Whether a stored row's content fields hold blob references."""
    from frontdesk.audit import blobs, crypto

    packed = row.packed_payload
    return bool(blobs.references({k: v for k, v in packed.items() if k not in crypto.CLEAR_FIELDS}))


@pytest.mark.parametrize("encrypted", [False, True], ids=["clear", "encrypted"])
def test_0014_packs_a_stored_log_into_blobs_and_verify_passes_before_and_after(
    empty_url: str, encrypted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64
    import functools
    import os

    from frontdesk.audit import blobs, crypto
    from frontdesk.audit.store import AuditLog
    from tests.audit.test_audit_blobs import conversation

    raw = os.urandom(32)
    key = crypto.MasterKey(raw) if encrypted else None
    if encrypted:  # The migration converts encrypted rows with the master key at hand.
        monkeypatch.setenv("FRONTDESK_MASTER_KEY", base64.b64encode(raw).decode())

    async def read() -> tuple[dict[str, bool], list[Any], dict[str, list[str]], list[bool]]:
        async with await AuditLog.open(empty_url, master_key=key) as log:
            verdicts = {c.conversation_id: c.ok for c in (await log.verify()).conversations}
            rows = {c: await log.events(c) for c in ("conv-1", "conv-2")}
        stored = {c: [r.payload_json for r in rs] for c, rs in rows.items()}
        refers = [_refers(r) for r in rows["conv-1"]]
        return verdicts, [r.payload for r in rows["conv-1"]], stored, refers

    async def write_old_format() -> None:
        with monkeypatch.context() as old:  # What the code before 0014 stored: no references.
            for name in ("MIN_TEXT", "MIN_DICT", "MIN_LIST"):
                old.setattr(blobs, name, 10**9)
            old.setattr(crypto, "seal", functools.partial(crypto.seal, deflate=False))
            async with await AuditLog.open(empty_url, master_key=key) as log:
                for batch in conversation(6):
                    await log.append("conv-1", batch, user_id="alice")
                for batch in conversation(2, prefix="tampered "):
                    await log.append("conv-2", batch, user_id="alice")
        # A broken chain is never "healed" by 0014.
        await _edit_audit_rows(
            empty_url,
            "UPDATE audit_event SET turn_id = 'moved' WHERE conversation_id = 'conv-2' AND seq = 1",
        )

    def migrate(revision: str) -> None:
        if revision == "head":
            engine = create_engine(empty_url)
            try:
                asyncio.run(upgrade_schema(engine, "head"))
            finally:
                asyncio.run(engine.dispose())
        else:
            asyncio.run(_downgrade_to(empty_url, revision))

    asyncio.run(write_old_format())
    verdicts, before, stored_before, refers = asyncio.run(read())
    assert verdicts == {"conv-1": True, "conv-2": False} and not any(refers)
    migrate(_before("0014_audit_blobs"))  # Nothing to put back: the rows stay as they are.
    assert "audit_blob" not in asyncio.run(_tables(empty_url))
    migrate("head")
    verdicts, after, stored, refers = asyncio.run(read())
    assert verdicts == {"conv-1": True, "conv-2": False} and after == before
    assert all(refers[1::3])  # Every model attempt refers to its messages.
    assert sum(map(len, stored["conv-1"])) < 0.6 * sum(map(len, stored_before["conv-1"]))
    assert stored["conv-2"] == stored_before["conv-2"]  # The tampered chain is left alone.
    migrate(_before("0014_audit_blobs"))
    assert "audit_blob" not in asyncio.run(_tables(empty_url))
    if not encrypted:  # The very rows (and hashes) written before, back from the blobs.
        engine = create_engine(empty_url)
        try:

            async def raw_rows() -> list[str]:
                async with engine.connect() as conn:
                    query = "SELECT payload_json FROM audit_event WHERE conversation_id = 'conv-1'"
                    return list((await conn.execute(sa.text(query + " ORDER BY seq"))).scalars())

            assert asyncio.run(raw_rows()) == stored_before["conv-1"]
        finally:
            asyncio.run(engine.dispose())
    migrate("head")
    verdicts, again, _, _ = asyncio.run(read())
    assert verdicts == {"conv-1": True, "conv-2": False} and again == before


async def _chains_in_text_form(url: str) -> dict[str, bool]:
    """Each conversation's chain verdict, read with plain SQL (the schema is not at head)."""
    from frontdesk.audit.chain import Head, verify_chain

    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = list(await conn.execute(sa.text("SELECT * FROM audit_event ORDER BY seq, id")))
            heads = {
                r.conversation_id: Head(r.seq, r.hash)
                for r in await conn.execute(sa.text("SELECT * FROM audit_head"))
            }
            prompts = {
                r.sha256: json.loads(r.text_json)
                for r in await conn.execute(sa.text("SELECT * FROM audit_prompt"))
            }
    finally:
        await engine.dispose()
    return {
        cid: verify_chain(
            cid, [r for r in rows if r.conversation_id == cid], head=head, prompts=prompts
        ).ok
        for cid, head in heads.items()
    }


async def _key_rows(url: str) -> dict[str, Any]:
    from frontdesk.audit import crypto

    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            kids = (await conn.execute(sa.text("SELECT kid FROM audit_key"))).scalars()
            return await conn.run_sync(crypto.load_rows, list(kids))
    finally:
        await engine.dispose()


async def _stored_audit(url: str) -> tuple[list[Any], list[Any], set[str]]:
    """The audit rows and blobs exactly as stored (column values), and the audit indexes."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = list(
                await conn.execute(
                    sa.text(
                        "SELECT conversation_id, seq, payload_json"
                        " FROM audit_event ORDER BY conversation_id, seq"
                    )
                )
            )
            bodies = list(await conn.execute(sa.text("SELECT ref, kid, body FROM audit_blob")))
            indexes = await conn.run_sync(
                lambda c: {str(i["name"]) for i in sa.inspect(c).get_indexes("audit_event")}
            )
    finally:
        await engine.dispose()
    return rows, bodies, indexes


@pytest.mark.parametrize("encrypted", [False, True], ids=["clear", "encrypted"])
def test_0017_stores_the_log_deflated_and_verify_passes_before_and_after(
    empty_url: str, encrypted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import base64
    import os

    from frontdesk.audit import blobs, compact, crypto
    from frontdesk.audit.store import AuditLog
    from tests.audit.test_audit_blobs import conversation

    raw = os.urandom(32)
    key = crypto.MasterKey(raw) if encrypted else None

    async def write() -> None:
        async with await AuditLog.open(empty_url, master_key=key) as log:
            for batch in conversation(6):
                await log.append("conv-1", batch, user_id="alice")
            for batch in conversation(2, prefix="tampered "):
                await log.append("conv-2", batch, user_id="alice")
        # A broken chain stays broken either way.
        await _edit_audit_rows(
            empty_url,
            "UPDATE audit_event SET turn_id = 'moved' WHERE conversation_id = 'conv-2' AND seq = 1",
        )

    async def read() -> tuple[dict[str, bool], list[Any], dict[str, Any]]:
        async with await AuditLog.open(empty_url, master_key=key) as log:
            verdicts = {c.conversation_id: c.ok for c in (await log.verify()).conversations}
            rows = await log.events("conv-1")
            heads = await log.heads()
        return verdicts, [(r.payload, r.payload_json, r.hash) for r in rows], heads

    def size(values: list[Any]) -> int:
        return sum(len(v) for v in values)

    asyncio.run(write())
    verdicts, before, heads = asyncio.run(read())
    assert verdicts == {"conv-1": True, "conv-2": False}
    rows, bodies, indexes = asyncio.run(_stored_audit(empty_url))
    assert all(compact.is_deflated(r.payload_json) for r in rows)
    assert "ix_audit_event_turn" not in indexes
    deflated = size([r.payload_json for r in rows]) + size([b.body for b in bodies])

    if encrypted:  # Sealed deflated: sealed again plain with the key, left as they are without.
        asyncio.run(_downgrade_to(empty_url, _before("0017_audit_compact")))
        texts = [r.payload_json for r in asyncio.run(_stored_audit(empty_url))[0]]
        assert all(isinstance(t, str) for t in texts) and any('"zip"' in t for t in texts[:18])
        assert asyncio.run(_chains_in_text_form(empty_url)) == verdicts
        engine = create_engine(empty_url)
        try:
            asyncio.run(upgrade_schema(engine, "head"))
        finally:
            asyncio.run(engine.dispose())
        assert asyncio.run(read())[:2] == (verdicts, before)
        monkeypatch.setenv("FRONTDESK_MASTER_KEY", base64.b64encode(raw).decode())
    asyncio.run(_downgrade_to(empty_url, _before("0017_audit_compact")))
    rows, bodies, indexes = asyncio.run(_stored_audit(empty_url))
    assert "ix_audit_event_turn" in indexes
    key_rows = asyncio.run(_key_rows(empty_url))
    texts = [r.payload_json for r in rows]  # Text again, as the code before 0017 wrote it.
    assert all(isinstance(t, str) for t in texts) and all(t.startswith("{") for t in texts)
    assert all(isinstance(b.body, str) for b in bodies)
    for ref, kid, body in bodies:
        if kid is None:
            assert json.loads(body) is not None and not compact.is_deflated(body)
        else:  # Sealed, base64, plain inside: what the code before 0017 opens.
            assert key is not None
            plain = blobs.decrypt(body, ref, crypto.DataKeys(key).unwrapped(key_rows[kid]))
            assert plain is not None and json.loads(plain) is not None, ref
    ratio = 0.75 if encrypted else 0.6  # Ciphertext does not deflate, only what is around it.
    text_bodies = size([b.body for b in bodies])
    assert deflated < ratio * (size(texts) + text_bodies)
    conv_1 = texts[: len(before)]
    if encrypted:  # Sealed plain again (the code before 0017 cannot inflate), chain relinked.
        assert not any('"zip"' in t for t in conv_1) and any('"zip"' in t for t in texts)
    else:
        assert conv_1 == [payload_json for _, payload_json, _ in before]
    assert asyncio.run(_chains_in_text_form(empty_url)) == verdicts  # What 0014's code checks.

    engine = create_engine(empty_url)
    try:
        asyncio.run(upgrade_schema(engine, "head"))
    finally:
        asyncio.run(engine.dispose())
    rows, bodies, indexes = asyncio.run(_stored_audit(empty_url))
    assert all(compact.is_deflated(r.payload_json) for r in rows)
    again = size([r.payload_json for r in rows]) + size([b.body for b in bodies])
    # Sealed blobs come back up raw but plain inside (the upgrade needs no key to run).
    assert again == deflated if not encrypted else deflated < again < size(texts) + text_bodies
    assert "ix_audit_event_turn" not in indexes
    verdicts_after, after, heads_after = asyncio.run(read())
    assert verdicts_after == verdicts and [p for p, _, _ in after] == [p for p, _, _ in before]
    assert (after, heads_after) == (before, heads) if not encrypted else heads_after != heads


async def _narrow_form(url: str) -> tuple[set[str], list[Any], list[Any], set[str]]:
    """`audit_event`'s columns, its rows and heads as stored, and its unique keys' names."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:

            def schema(c: sa.Connection) -> tuple[set[str], set[str]]:
                inspector = sa.inspect(c)
                columns = {str(col["name"]) for col in inspector.get_columns("audit_event")}
                keys = {str(u["name"]) for u in inspector.get_unique_constraints("audit_event")} | {
                    str(i["name"]) for i in inspector.get_indexes("audit_event")
                }
                return columns, keys

            columns, keys = await conn.run_sync(schema)
            rows = list(
                await conn.execute(
                    sa.text("SELECT * FROM audit_event ORDER BY conversation_id, seq")
                )
            )
            heads = list(await conn.execute(sa.text("SELECT * FROM audit_head")))
    finally:
        await engine.dispose()
    return columns, rows, heads, keys


async def _prompt_texts(url: str) -> dict[str, str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            found = await conn.execute(sa.text("SELECT sha256, text_json FROM audit_prompt"))
            return {sha: json.loads(text) for sha, text in found}
    finally:
        await engine.dispose()


def _old_verdicts(rows: list[Any], heads: list[Any], prompts: dict[str, str]) -> dict[str, bool]:
    """Each chain's verdict as the code before 0020 checks it (its stored links too)."""
    from types import SimpleNamespace

    from frontdesk.audit import compact
    from frontdesk.audit.chain import Head, verify_chain

    texts = [
        SimpleNamespace(**{**r._asdict(), "payload_json": compact.inflate(r.payload_json)})
        for r in rows
    ]
    return {
        h.conversation_id: verify_chain(
            h.conversation_id,
            [r for r in texts if r.conversation_id == h.conversation_id],
            head=Head(h.seq, h.hash),
            prompts=prompts,
        ).ok
        for h in heads
    }


@pytest.mark.parametrize("encrypted", [False, True], ids=["clear", "encrypted"])
def test_0020_narrows_the_rows_and_verify_passes_before_and_after(
    empty_url: str, encrypted: bool
) -> None:
    import io
    import os

    from frontdesk.audit import crypto
    from frontdesk.audit.chain import GENESIS_HASH
    from frontdesk.audit.events import AuditEvent
    from frontdesk.audit.export import write_jsonl
    from frontdesk.audit.store import AuditLog
    from tests.audit.test_audit_blobs import conversation

    key = crypto.MasterKey(os.urandom(32)) if encrypted else None
    # Ids that are not uuid hex are stored as text and must read back exactly.
    odd = [
        AuditEvent(kind="reply", turn_id=turn, payload={"text": "x"}, event_id=event)
        for turn, event in [
            ("erasure", "e" * 16),
            ("ABCDEF0123456789ABCDEF0123456789", "0123456789abcdef" * 2),
            ("cafécafécafécaf", "g" * 32),
            ("ff" * 16, "é" * 8),
        ]
    ]

    async def write() -> None:
        async with await AuditLog.open(empty_url, master_key=key) as log:
            for batch in conversation(6):
                await log.append("conv-1", batch, user_id="alice")
            await log.append("conv-1", odd, user_id="alice")
            for batch in conversation(2, prefix="tampered "):
                await log.append("conv-2", batch, user_id="alice")
        # A broken chain stays broken either way.
        await _edit_audit_rows(
            empty_url,
            "UPDATE audit_event SET kind = 'moved', created_at = '2026-01-01'"
            " WHERE conversation_id = 'conv-2' AND seq = 3",
            guard_back=True,
        )

    async def read() -> tuple[dict[str, Any], list[Any], Any, str]:
        async with await AuditLog.open(empty_url, master_key=key) as log:
            verdicts = {
                c.conversation_id: (c.ok, c.problem) for c in (await log.verify()).conversations
            }
            rows = [
                (r.seq, r.event_id, r.turn_id, r.payload, r.prev_hash, r.hash)
                for r in await log.events("conv-1")
            ]
            out = io.StringIO()
            write_jsonl(await log.events("conv-1"), out)
            return verdicts, rows, await log.heads(), out.getvalue()

    def upgrade() -> None:
        engine = create_engine(empty_url)
        try:
            asyncio.run(upgrade_schema(engine, "head"))
        finally:
            asyncio.run(engine.dispose())

    asyncio.run(write())
    before = asyncio.run(read())
    verdicts = before[0]
    assert verdicts["conv-1"] == (True, None) and verdicts["conv-2"][0] is False
    assert verdicts["conv-2"][1].seq == 3
    columns, rows, heads, keys = asyncio.run(_narrow_form(empty_url))
    assert not {"prev_hash", "id"} & columns and "uq_audit_event_event_id" not in keys
    assert all(isinstance(r.hash, bytes) and len(r.hash) == 32 for r in rows)
    assert all(isinstance(h.hash, bytes) and len(h.hash) == 32 for h in heads)
    assert sum(len(r.event_id) == 16 for r in rows) == len(rows) - 3  # But the odd ones.
    assert all(len(r.prompt_sha256) == 32 for r in rows if r.prompt_sha256 is not None)
    assert sum(len(r.created_at) == 8 for r in rows) == len(rows) - 1  # But the hand-edited.
    assert [r[1:3] for r in before[1][-4:]] == [(e.event_id, e.turn_id) for e in odd]

    # Down: the form the code before 0020 reads and checks (stored links included).
    asyncio.run(_downgrade_to(empty_url, _before("0020_audit_narrow")))
    columns, rows, heads, keys = asyncio.run(_narrow_form(empty_url))
    assert {"prev_hash", "id"} <= columns and "uq_audit_event_event_id" in keys
    conv_1 = [r for r in rows if r.conversation_id == "conv-1"]
    assert [r.hash for r in conv_1] == [h for *_, h in before[1]]
    assert [r.prev_hash for r in conv_1] == [GENESIS_HASH] + [r.hash for r in conv_1[:-1]]
    assert {h.conversation_id: h.hash for h in heads} == {c: h.hash for c, h in before[2].items()}
    prompts = asyncio.run(_prompt_texts(empty_url))
    assert _old_verdicts(rows, heads, prompts) == {"conv-1": True, "conv-2": False}

    # Up again: the same rows, hashes, links, heads, verdicts and export.
    upgrade()
    assert asyncio.run(read()) == before
    columns, rows, heads, keys = asyncio.run(_narrow_form(empty_url))
    assert not {"prev_hash", "id"} & columns and "uq_audit_event_event_id" not in keys
    assert all(isinstance(r.hash, bytes) and len(r.hash) == 32 for r in rows)


@pytest.mark.anyio
async def test_0023_gives_every_fact_its_trust_by_its_source_and_takes_it_back(
    empty_url: str,
) -> None:
    now = {"now": datetime.now(UTC)}
    row = (
        "INSERT INTO memory (id, user_id, text, source, created_at, updated_at)"
        " VALUES (:id, 'u', :text, :source, :now, :now)"
    )
    sources = ["memory_expert", "conversation_summary", "user", "handler", "operator"]
    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, _before("0023_memory_trust"))
        async with engine.begin() as conn:
            for source in sources:
                await conn.execute(
                    sa.text(row), {"id": source, "source": source, "text": f"by {source}", **now}
                )
        await upgrade_schema(engine, "0023_memory_trust")
        async with engine.begin() as conn:
            rows = (await conn.execute(sa.text("SELECT id, trust FROM memory"))).all()
            trusts: dict[str, str] = {row[0]: row[1] for row in rows}
            # A row written without a trust is the customer's word (the safe side).
            await conn.execute(
                sa.text(row), {"id": "new", "source": "handler", "text": "later", **now}
            )
            unnamed = await conn.execute(sa.text("SELECT trust FROM memory WHERE text = 'later'"))
            assert unnamed.scalar_one() == "customer"
        with pytest.raises(sa.exc.IntegrityError):
            async with engine.begin() as conn:
                await conn.execute(sa.text("UPDATE memory SET trust = 'bank' WHERE id = 'user'"))
    finally:
        await engine.dispose()
    assert trusts == {
        "memory_expert": "customer",
        "conversation_summary": "customer",
        "user": "customer",
        "handler": "verified",
        "operator": "verified",
    }
    await _downgrade_to(empty_url, _before("0023_memory_trust"))
    assert "trust" not in await _columns(empty_url, "memory")
    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, "head")
    finally:
        await engine.dispose()
    assert "trust" in await _columns(empty_url, "memory")


@pytest.mark.anyio
async def test_0030_gives_facts_and_passages_a_profile_and_takes_it_back(empty_url: str) -> None:
    """A fact learnt in a conversation takes that conversation's recorded profile; the rest
    (and a fact of a conversation from before profiles) the default profile."""
    now = {"now": datetime.now(UTC)}
    conversation = (
        "INSERT INTO conversation (id, user_id, created_at, metadata, profile)"
        " VALUES (:id, 'u', :now, '{}', :profile)"
    )
    fact = (
        "INSERT INTO memory (id, user_id, text, source, conversation_id, created_at, updated_at)"
        " VALUES (:id, 'u', :text, 'handler', :conversation_id, :now, :now)"
    )
    passage = (
        "INSERT INTO knowledge_passage (id, source, position, title, text, version, sha256,"
        " created_at, updated_at) VALUES ('p', 'fees.md', 0, 'Fees', 'Free', 1, 'x', :now, :now)"
    )
    revision = "0030_profile_data"
    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, _before(revision))
        async with engine.begin() as conn:
            conversations: list[dict[str, Any]] = [
                {"id": "bank-1", "profile": "bank", **now},
                {"id": "old-1", "profile": None, **now},
            ]
            for values in conversations:
                await conn.execute(sa.text(conversation), values)
            for fact_id, conversation_id in (("in-bank", "bank-1"), ("in-old", "old-1")):
                row: dict[str, Any] = {"id": fact_id, "text": fact_id}
                await conn.execute(
                    sa.text(fact), {**row, "conversation_id": conversation_id, **now}
                )
            app_fact: dict[str, Any] = {"id": "app", "text": "app", "conversation_id": None}
            await conn.execute(sa.text(fact), {**app_fact, **now})
            await conn.execute(sa.text(passage), now)
        await upgrade_schema(engine, revision)
        async with engine.begin() as conn:
            rows = (await conn.execute(sa.text("SELECT id, profile FROM memory"))).all()
            profiles: dict[str, str] = {row[0]: row[1] for row in rows}
            library = await conn.execute(sa.text("SELECT profile FROM knowledge_passage"))
            assert library.scalar_one() == "default"
    finally:
        await engine.dispose()
    assert profiles == {"in-bank": "bank", "in-old": "default", "app": "default"}
    await _downgrade_to(empty_url, _before(revision))
    assert "profile" not in await _columns(empty_url, "memory")
    assert "profile" not in await _columns(empty_url, "knowledge_passage")
    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, "head")
    finally:
        await engine.dispose()
    assert "profile" in await _columns(empty_url, "knowledge_passage")


@pytest.mark.anyio
async def test_0035_indexes_a_users_newest_facts_on_postgresql_and_takes_it_back(
    empty_url: str,
) -> None:
    def memory_indexes(conn: sa.Connection) -> set[str]:
        return {str(i["name"]) for i in sa.inspect(conn).get_indexes("memory")}

    engine = create_engine(empty_url)
    try:
        postgresql = engine.dialect.name == "postgresql"
        await upgrade_schema(engine, "0035_memory_newest")
        async with engine.connect() as conn:
            upgraded = await conn.run_sync(memory_indexes)
        await _downgrade_to(empty_url, _before("0035_memory_newest"))
        async with engine.connect() as conn:
            downgraded = await conn.run_sync(memory_indexes)
    finally:
        await engine.dispose()
    # SQLite's `ix_memory_user_current` already ends with the rowid: nothing to add there.
    assert ("ix_memory_user_newest" in upgraded) is postgresql
    assert "ix_memory_user_current" in upgraded
    assert upgraded - downgraded == ({"ix_memory_user_newest"} if postgresql else set())


@pytest.mark.anyio
async def test_0036_makes_the_finish_keep_a_later_handoff_and_takes_it_back(
    empty_url: str,
) -> None:
    def finish_source(conn: sa.Connection) -> str | None:
        if conn.dialect.name != "postgresql":
            return None
        found = conn.execute(
            sa.text("SELECT prosrc FROM pg_proc WHERE proname = 'frontdesk_finish_turn'")
        ).scalar_one()
        return str(found)

    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, _before("0036_later_handoff"))
        async with engine.connect() as conn:
            before = await conn.run_sync(finish_source)
        await upgrade_schema(engine, "0036_later_handoff")
        async with engine.connect() as conn:
            upgraded = await conn.run_sync(finish_source)
        await _downgrade_to(empty_url, _before("0036_later_handoff"))
        async with engine.connect() as conn:
            downgraded = await conn.run_sync(finish_source)
    finally:
        await engine.dispose()
    if engine.dialect.name != "postgresql":  # SQLite has no functions: nothing changes.
        assert before is upgraded is downgraded is None
        return
    assert before is not None and upgraded is not None
    assert "handoff" not in before  # Revision 0031's: a hand-off dropped on a re-save.
    assert "outcome ->> 'handoff' IS NOT NULL" in upgraded
    assert "handoff = coalesce(o.handoff, excluded.handoff)" in upgraded
    assert downgraded == before  # 0031's body, exactly.


@pytest.mark.anyio
async def test_0037_bumps_the_path_version_on_every_path_change_and_takes_it_back(
    empty_url: str,
) -> None:
    """Rewriting or deleting a message and adding, rewriting or removing a summary each bump
    the conversation's `path_version` (triggers, whoever writes); appending a message does
    not. A downgrade drops the triggers and the column and keeps every row."""
    now = datetime.now(UTC)

    def version(conn: sa.Connection) -> int:
        query = "SELECT path_version FROM conversation WHERE id = 'c'"
        return int(conn.execute(sa.text(query)).scalar_one())

    def writes(conn: sa.Connection) -> list[int]:
        conn.execute(
            sa.text("INSERT INTO conversation (id, created_at, metadata) VALUES ('c', :now, '{}')"),
            {"now": now},
        )
        for message_id, parent in (("m1", None), ("m2", "m1")):
            conn.execute(
                sa.text(
                    "INSERT INTO message (id, conversation_id, parent_id, role, content,"
                    " created_at, token_count) VALUES (:id, 'c', :parent, 'user', 'hi', :now, 0)"
                ),
                {"id": message_id, "parent": parent, "now": now},
            )
        seen = [version(conn)]
        for statement in (
            "UPDATE message SET content = 'erased' WHERE id = 'm1'",
            "INSERT INTO summary (id, conversation_id, covers_until_message_id, content,"
            " token_count, created_at) VALUES ('s', 'c', 'm1', 'S', 1, :now)",
            "UPDATE summary SET content = 'erased' WHERE id = 's'",
            "DELETE FROM summary WHERE id = 's'",
            "DELETE FROM message WHERE id = 'm2'",
        ):
            conn.execute(sa.text(statement), {"now": now} if ":now" in statement else {})
            seen.append(version(conn))
        return seen

    def triggers(conn: sa.Connection) -> set[str]:
        if conn.dialect.name == "postgresql":
            query = "SELECT tgname FROM pg_trigger WHERE tgname LIKE '%path%'"
        else:
            query = "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '%path%'"
        return {str(name) for name in conn.execute(sa.text(query)).scalars()}

    engine = create_engine(empty_url)
    try:
        await upgrade_schema(engine, "0037_path_version")
        async with engine.begin() as conn:
            seen = await conn.run_sync(writes)
            upgraded = await conn.run_sync(triggers)
        await _downgrade_to(empty_url, _before("0037_path_version"))
        async with engine.connect() as conn:
            downgraded = await conn.run_sync(triggers)
            left = (await conn.execute(sa.text("SELECT id FROM message"))).scalars().all()
    finally:
        await engine.dispose()
    assert seen == [0, 1, 2, 3, 4, 5]
    assert upgraded == {
        "message_path_update",
        "message_path_delete",
        "summary_path_insert",
        "summary_path_update",
        "summary_path_delete",
    }
    assert downgraded == set()
    assert left == ["m1"]
    assert "path_version" not in await _columns(empty_url, "conversation")
