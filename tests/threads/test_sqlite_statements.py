"""`frontdesk.db.SqliteStatement`: prebuilt statements run straight on the pysqlite driver.

They must write exactly what `Connection.execute` writes (same SQL, defaults and bind
processing: timestamps, JSON) and fail with the same typed SQLAlchemy errors, because the
store's and the audit log's retries and checks look for those.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError

from frontdesk.audit.store import _SQLITE, _STATEMENTS
from frontdesk.db import SqliteStatement, run_write, sqlite_driver
from frontdesk.threads._turn import _INSERT_MESSAGE, _INSERT_MESSAGE_SQLITE
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[ConversationStore]:
    """A store on a SQLite file (the driver path exists on SQLite only)."""
    opened = await ConversationStore.open(f"sqlite:///{tmp_path / 'frontdesk.db'}")
    try:
        yield opened
    finally:
        await opened.aclose()


def message_row(conversation_id: str, **values: Any) -> dict[str, Any]:
    """A message row as `threads._turn.write` passes it."""
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
        **values,
    }


async def test_a_row_written_on_the_driver_equals_one_written_by_sqlalchemy(
    sqlite_store: ConversationStore,
) -> None:
    conversation = f"raw-{uuid.uuid4().hex[:12]}"
    await sqlite_store.add_user_message(conversation, "hello")
    versions = {"response": "response@3"}

    def both(conn: Connection) -> list[tuple[Any, ...]]:
        raw = sqlite_driver(conn)
        assert raw is not None  # A SQLite write runs on the pysqlite writer.
        stored = []
        for prompt_versions in (None, versions):
            ours = message_row(conversation, prompt_versions=prompt_versions)
            theirs = message_row(conversation, prompt_versions=prompt_versions)
            _INSERT_MESSAGE_SQLITE.execute(raw, ours)
            conn.execute(_INSERT_MESSAGE, theirs)
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


async def test_literal_values_of_the_statement_are_bound(tmp_path: Path) -> None:
    # The audit head upsert carries seq=0 and the genesis hash as literal values.
    assert _SQLITE.head.sql == str(
        _STATEMENTS[0].head.compile(dialect=sa.create_engine("sqlite://").dialect)
    )
    raw = sqlite3.connect(tmp_path / "head.db")
    raw.execute("CREATE TABLE audit_head (conversation_id TEXT PRIMARY KEY, seq INT, hash TEXT)")
    assert _SQLITE.head.execute(raw, {"conversation_id": "c-1"}).fetchone() == (0, "0" * 64)
    raw.close()


async def test_driver_errors_are_sqlalchemys_typed_errors(tmp_path: Path) -> None:
    raw = sqlite3.connect(tmp_path / "errors.db")
    raw.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    insert = SqliteStatement(sa.text("INSERT INTO t (id, v) VALUES (:id, :v)"))
    insert.execute(raw, {"id": 1, "v": "secret"})
    with pytest.raises(IntegrityError) as caught:
        insert.execute(raw, {"id": 1, "v": "secret"})
    assert isinstance(caught.value.orig, sqlite3.IntegrityError)
    assert "secret" not in str(caught.value)  # Parameters stay out of the message.
    with pytest.raises(IntegrityError):
        insert.executemany(raw, [{"id": 2, "v": "a"}, {"id": 2, "v": "b"}])
    raw.close()


async def test_only_the_sqlite_writer_runs_statements_on_the_driver(
    store: ConversationStore,
) -> None:
    on_driver = await run_write(store.engine, lambda conn: sqlite_driver(conn) is not None)
    assert on_driver == (store.engine.dialect.name == "sqlite")
    async with store.engine.connect() as conn:  # The async engine's own connection.
        assert await conn.run_sync(sqlite_driver) is None


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
        assert sqlite_driver(conn) is not None
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
