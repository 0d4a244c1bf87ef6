"""Several real processes (and threads) writing one conversation: nothing lost or duplicated.

Each worker is a separate Python process running `_store_worker.py`; they start together
(a go-file barrier) and append to the same conversation on the same database.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from frontdesk.threads.models import Conversation
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("_store_worker.py")


def run_workers(mode: str, url: str, conv: str, procs: int, count: int, tmp: Path) -> None:
    """Start `procs` worker processes together and wait for all; fail on any error."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    go = tmp / f"go-{uuid.uuid4().hex}"
    ready = [tmp / f"ready-{uuid.uuid4().hex}" for _ in range(procs)]
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), mode, url, conv, f"p{n}", str(count), str(r), str(go)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, r in enumerate(ready)
    ]
    try:
        while not all(r.exists() for r in ready):
            if any(w.poll() is not None for w in workers):
                break
            threading.Event().wait(0.02)
        go.touch()
        outcomes = [(w.wait(timeout=240), *w.communicate()) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    failures = [err for code, _, err in outcomes if code != 0]
    assert not failures, failures[0]


async def check_linear_turns(url: str, conv: str, procs: int, count: int) -> None:
    """Every turn exactly once, whole pairs, each reply under its user message, one chain."""
    store = await ConversationStore.open(url)
    try:
        messages = await store.messages(conv)
        leaf = await store.active_leaf(conv)
        assert leaf is not None
        path = await store.path(leaf.id)
        branches = await store.branches(conv)
    finally:
        await store.aclose()
    users = {m.id: m for m in messages if m.role == "user"}
    replies = [m for m in messages if m.role == "assistant"]
    expected = {f"p{n}-{i}" for n in range(procs) for i in range(count)}
    assert len(messages) == 2 * procs * count
    assert sorted(m.content for m in users.values()) == sorted(expected)
    assert sorted(r.content for r in replies) == sorted(f"reply to {t}" for t in expected)
    for reply in replies:
        assert reply.parent_id is not None
        assert reply.content == f"reply to {users[reply.parent_id].content}"
    assert [m.id for m in branches] == [leaf.id]
    assert len(path) == len(messages)
    assert [m.role for m in path] == ["user", "assistant"] * (procs * count)
    for parent, child in zip(path, path[1:], strict=False):
        assert child.parent_id == parent.id


@pytest.mark.processes
@pytest.mark.postgres
async def test_four_processes_fifty_turns_each_on_postgres(
    fresh_pg_url: str, tmp_path: Path
) -> None:
    conv = "conv-shared"
    await (await ConversationStore.open(fresh_pg_url)).aclose()
    run_workers("turns", fresh_pg_url, conv, procs=4, count=50, tmp=tmp_path)
    await check_linear_turns(fresh_pg_url, conv, procs=4, count=50)


@pytest.mark.processes
async def test_four_processes_on_sqlite_never_see_database_locked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    conv = "conv-shared"
    await (await ConversationStore.open(url)).aclose()
    run_workers("turns", url, conv, procs=4, count=25, tmp=tmp_path)
    await check_linear_turns(url, conv, procs=4, count=25)


async def check_linear_appends(url: str, conv: str, procs: int, count: int) -> None:
    """Unlocked appends: all there once, each under the one before it (no fork)."""
    store = await ConversationStore.open(url)
    try:
        messages = await store.messages(conv)
        leaf = await store.active_leaf(conv)
        assert leaf is not None
        path = await store.path(leaf.id)
    finally:
        await store.aclose()
    assert sorted(m.content for m in messages) == sorted(
        f"p{n}-{i}" for n in range(procs) for i in range(count)
    )
    assert [m.id for m in path] == [m.id for m in messages]


@pytest.mark.processes
async def test_sqlite_serialises_unlocked_writers_with_begin_immediate(tmp_path: Path) -> None:
    # SQLite drops FOR UPDATE, so the read of the active leaf would not be locked by it ...
    table: sa.Table = Conversation.__table__  # type: ignore[attr-defined]
    locked = sa.select(table).with_for_update(key_share=True)
    pg_dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    assert "FOR" not in str(locked.compile(dialect=sqlite.dialect()))
    assert "FOR NO KEY UPDATE" in str(locked.compile(dialect=pg_dialect))
    # ... yet writers in four processes, without the conversation lock, never fork the chain:
    # BEGIN IMMEDIATE takes the write lock before the leaf is read.
    url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    await (await ConversationStore.open(url)).aclose()
    run_workers("append", url, "conv-shared", procs=4, count=30, tmp=tmp_path)
    await check_linear_appends(url, "conv-shared", procs=4, count=30)


@pytest.mark.processes
@pytest.mark.postgres
async def test_postgres_serialises_unlocked_writers_with_a_row_lock(
    fresh_pg_url: str, tmp_path: Path
) -> None:
    await (await ConversationStore.open(fresh_pg_url)).aclose()
    run_workers("append", fresh_pg_url, "conv-shared", procs=4, count=30, tmp=tmp_path)
    await check_linear_appends(fresh_pg_url, "conv-shared", procs=4, count=30)


def test_eight_threads_on_sqlite_never_see_database_locked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    conv = "conv-shared"
    errors: list[BaseException] = []

    async def turns(tag: str) -> None:
        store = await ConversationStore.open(url)
        try:
            for i in range(10):
                async with store.conversation_lock(conv, timeout=60):
                    user, _ = await store.add_user_message(conv, f"{tag}-{i}")
                    await store.add_assistant_message(user.id, f"reply to {tag}-{i}")
        finally:
            await store.aclose()

    def thread(tag: str) -> None:
        try:
            asyncio.run(turns(tag))
        except BaseException as e:  # Collected and asserted on below.
            errors.append(e)

    async def initialise() -> None:
        await (await ConversationStore.open(url)).aclose()

    asyncio.run(initialise())
    threads = [threading.Thread(target=thread, args=(f"p{n}",)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    asyncio.run(check_linear_turns(url, conv, procs=8, count=10))


@pytest.mark.processes
async def test_a_second_process_carries_the_conversation_on(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    store = await ConversationStore.open(url)
    first, _ = await store.add_user_message("conv-1", "hello", client_message_id="c-1")
    reply = await store.add_assistant_message(first.id, "hi there")
    await store.aclose()

    run_workers("turns", url, "conv-1", procs=1, count=1, tmp=tmp_path)

    store = await ConversationStore.open(url)
    try:
        leaf = await store.active_leaf("conv-1")
        assert leaf is not None
        path = await store.path(leaf.id)
    finally:
        await store.aclose()
    assert [m.content for m in path] == ["hello", "hi there", "p0-0", "reply to p0-0"]
    assert path[2].parent_id == reply.id
