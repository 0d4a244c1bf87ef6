"""`frontdesk._driver.Statement`: prebuilt statements run straight on the pysqlite driver.

They must write exactly what `Connection.execute` writes (same SQL, defaults and bind
processing: timestamps, JSON) and fail with the same typed SQLAlchemy errors, because the
store's and the audit log's retries and checks look for those.
"""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError

from frontdesk._driver import Statement, savepoint
from frontdesk._driver import statement as statement_module
from frontdesk._driver.statement import driver_connection
from frontdesk.audit.store import _HEAD, _head
from frontdesk.db import run_write
from frontdesk.threads._writes import _INSERT_MESSAGE
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


def message_row(conversation_id: str, **values: Any) -> dict[str, Any]:
    """A message row as `threads._writes.write` passes it."""
    return {
        "id": uuid.uuid4().hex,
        "conversation_id": conversation_id,
        "parent_id": None,
        "role": "assistant",
        "content": "Ok great, one bag of purple potatoes \u2014 press confirm",
        "created_at": datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC),
        "token_count": 12,
        "client_message_id": None,
        "model": "offline",
        "prompt_versions": None,
        "kind": "message",
        "author": "bot",
        **values,
    }


async def test_a_row_written_on_the_driver_equals_one_written_by_sqlalchemy(
    sqlite_store: ConversationStore,
) -> None:
    conversation = f"raw-{uuid.uuid4().hex[:12]}"
    await sqlite_store.add_user_message(conversation, "hello")
    versions = {"response": "response@3"}

    def both(conn: Connection) -> list[tuple[Any, ...]]:
        raw = driver_connection(conn)
        assert raw is not None  # A SQLite write runs on the pysqlite writer.
        stored = []
        for prompt_versions in (None, versions):
            ours = message_row(conversation, prompt_versions=prompt_versions)
            theirs = message_row(conversation, prompt_versions=prompt_versions)
            _INSERT_MESSAGE.run(conn, ours)  # On the driver.
            conn.execute(_INSERT_MESSAGE.statement, theirs)  # Through SQLAlchemy.
            for row in (ours, theirs):
                found = raw.execute("SELECT * FROM message WHERE id = ?", (row["id"],))
                stored.append(found.fetchone()[1:])  # All but the id.
        return stored

    stored = await run_write(sqlite_store.engine, both)
    assert stored[0] == stored[1] and stored[2] == stored[3]
    assert stored[0] != stored[2]  # The JSON column differs, so the comparison sees it.
    read = [m for m in await sqlite_store.messages(conversation) if m.role == "assistant"]
    kept = [m.prompt_versions for m in read]  # Same times: in id order.
    assert kept.count(None) == 2 and kept.count(versions) == 2
    assert {m.created_at for m in read} == {message_row("")["created_at"]}


def sync_sqlite(path: Path) -> sa.Engine:
    """A plain SQLAlchemy engine on pysqlite: its connections run statements on the driver."""
    return sa.create_engine(f"sqlite:///{path}")


async def test_literal_values_of_the_statement_are_bound(tmp_path: Path) -> None:
    # The audit head upsert carries seq=0 and the genesis hash as literal values.
    built = _head(sqlite_insert)
    assert _HEAD.sql == str(built.compile(dialect=sa.create_engine("sqlite://").dialect))
    engine = sync_sqlite(tmp_path / "head.db")
    with engine.begin() as conn:
        assert driver_connection(conn) is not None
        conn.exec_driver_sql(
            "CREATE TABLE audit_head (conversation_id TEXT PRIMARY KEY, seq INT, hash BLOB)"
        )
        genesis = bytes(32)  # The genesis hash's stored form (0020_audit_narrow).
        assert _HEAD.first(conn, {"conversation_id": "c-1"}) == {"seq": 0, "hash": genesis}
        assert _HEAD.rows(conn, {"conversation_id": "c-1"}) == [{"seq": 0, "hash": genesis}]
    engine.dispose()


async def test_driver_errors_are_sqlalchemys_typed_errors(tmp_path: Path) -> None:
    engine = sync_sqlite(tmp_path / "errors.db")
    insert = Statement(sa.text("INSERT INTO t (id, v) VALUES (:id, :v)"))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
        insert.run(conn, {"id": 1, "v": "secret"})
        with pytest.raises(IntegrityError) as caught:
            insert.run(conn, {"id": 1, "v": "secret"})
        assert isinstance(caught.value.orig, sqlite3.IntegrityError)
        assert "secret" not in str(caught.value)  # Parameters stay out of the message.
        with pytest.raises(IntegrityError):
            insert.run_many(conn, [{"id": 2, "v": "a"}, {"id": 2, "v": "b"}])
    engine.dispose()


async def test_a_statement_runs_through_sqlalchemy_off_the_writer(
    store: ConversationStore,
) -> None:
    # The same call on the async engine's connection (aiosqlite or asyncpg): SQLAlchemy's path.
    conversation = f"c-{uuid.uuid4().hex}"
    await store.add_user_message(conversation, "hello")
    select = Statement(sa.text("SELECT id, active_leaf_id FROM conversation WHERE id = :c"))
    async with store.engine.connect() as conn:
        assert await conn.run_sync(driver_connection) is None
        row = await conn.run_sync(lambda sync: select.first(sync, {"c": conversation}))
        missing = await conn.run_sync(lambda sync: select.first(sync, {"c": "nobody"}))
    on_writer = await run_write(store.engine, lambda sync: select.first(sync, {"c": conversation}))
    assert row is not None and row["id"] == conversation and row["active_leaf_id"] is not None
    assert missing is None
    assert dict(row) == dict(on_writer or {})


def test_a_step_that_fails_in_a_savepoint_leaves_the_rest_of_the_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The turn's lookups run in its first transaction, each in a savepoint: one that fails
    # is undone alone, before and after it the turn's writes stand (driver and SQLAlchemy).
    engine = sync_sqlite(tmp_path / "savepoint.db")
    insert = Statement(sa.text("INSERT INTO t (id) VALUES (:id)"))
    with engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    for on_driver in (True, False):
        with engine.connect() as conn, conn.begin():
            if not on_driver:  # As off the writer: SQLAlchemy's `begin_nested`.
                monkeypatch.setattr(statement_module, "driver_connection", lambda _: None)
            insert.run(conn, {"id": 1})
            with pytest.raises(ValueError), savepoint(conn):
                insert.run(conn, {"id": 2})
                raise ValueError("the lookup failed")
            with savepoint(conn):
                insert.run(conn, {"id": 3})
            insert.run(conn, {"id": 4})
        with engine.begin() as conn:
            assert [r[0] for r in conn.exec_driver_sql("SELECT id FROM t ORDER BY id")] == [
                1,
                3,
                4,
            ]
            conn.exec_driver_sql("DELETE FROM t")
    engine.dispose()


async def test_only_the_sqlite_writer_runs_statements_on_the_driver(
    store: ConversationStore,
) -> None:
    on_driver = await run_write(store.engine, lambda conn: driver_connection(conn) is not None)
    assert on_driver == (store.engine.dialect.name == "sqlite")
    async with store.engine.connect() as conn:  # The async engine's own connection.
        assert await conn.run_sync(driver_connection) is None


async def test_the_thread_read_on_the_driver_equals_the_read_through_sqlalchemy(
    sqlite_store: ConversationStore,
) -> None:
    from frontdesk.threads.summaries import SummaryStore, path_since_newest_sync

    conversation = f"c-{uuid.uuid4().hex}"
    leaf = None
    for i in range(4):
        question, _ = await sqlite_store.add_user_message(conversation, f"question {i} é")
        leaf = await sqlite_store.add_assistant_message(
            question.id, f"answer {i}", prompt_versions={"triage": "triage@1"}, model="m"
        )
        if i == 1:
            await SummaryStore(sqlite_store.engine).add(
                conversation_id=conversation,
                covers_until_message_id=leaf.id,
                content="the first two exchanges",
                token_count=7,
                covered_messages=4,
            )
    assert leaf is not None
    leaf_id = leaf.id

    def on_driver(conn: Connection) -> Any:
        assert driver_connection(conn) is not None
        return path_since_newest_sync(conn, leaf_id)

    driver = await run_write(sqlite_store.engine, on_driver)
    through_sqlalchemy = await SummaryStore(sqlite_store.engine).path_since_newest(leaf_id)
    assert driver == through_sqlalchemy
    assert driver.summary is not None and driver.summary.content == "the first two exchanges"
    assert [m.content for m in driver.messages] == [
        "question 2 é",
        "answer 2",
        "question 3 é",
        "answer 3",
    ]
    assert driver.messages[1].prompt_versions == {"triage": "triage@1"}
    assert driver.messages[0].created_at.tzinfo is not None


def test_only_the_seam_knows_the_driver() -> None:
    """The fast path has one home: no other module branches on pysqlite."""
    root = Path(__file__).resolve().parents[2]
    folders = ("frontdesk", "experts", "orchestrator", "threads", "audit", "examples")
    seam = root / "frontdesk" / "_driver"
    offenders = [
        str(path.relative_to(root))
        for folder in folders
        for path in (root / folder).rglob("*.py")
        if seam not in path.parents
        and any(
            word in path.read_text(encoding="utf-8")
            for word in ("driver_connection", "pysqlite", "import sqlite3")
        )
    ]
    assert offenders == []
