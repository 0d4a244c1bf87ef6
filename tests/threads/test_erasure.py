"""The erasure and retention steps on the store's tables, each in its caller's transaction."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from frontdesk.db import run_write
from frontdesk.threads import erasure
from frontdesk.threads.models import utcnow
from frontdesk.threads.store import ConversationStore

pytestmark = pytest.mark.anyio


async def _conversation(store: ConversationStore, user: str) -> str:
    conv = f"c-{uuid.uuid4().hex[:8]}"
    question, _ = await store.add_user_message(conv, "my card ends 4242", user_id=user)
    await store.add_assistant_message(question.id, "noted, 4242")
    return conv


async def test_each_step_erases_once_and_a_rerun_counts_nothing(store: ConversationStore) -> None:
    user, other = f"u-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    mine = await _conversation(store, user)
    theirs = await _conversation(store, other)
    digest = f"erased:{uuid.uuid4().hex}"
    await store.handler_state("shop", conversation_id=mine, user_id=user).user.put("k", "v")

    ids = await run_write(store.engine, lambda c: erasure.conversation_ids(c, [user, digest]))
    assert ids == [mine]
    first = await run_write(store.engine, lambda c: erasure.erase_messages(c, ids, user))
    again = await run_write(store.engine, lambda c: erasure.erase_messages(c, ids, user))
    assert (first, again) == (2, 0)
    assert {m.content for m in await store.messages(mine)} == {erasure.ERASED}
    assert {m.content for m in await store.messages(theirs)} == {"my card ends 4242", "noted, 4242"}
    state = await run_write(store.engine, lambda c: erasure.erase_handler_state(c, ids, user))
    assert state == 1
    assert await run_write(store.engine, lambda c: erasure.erase_handler_state(c, ids, user)) == 0

    moved = await run_write(store.engine, lambda c: erasure.disown_conversations(c, user, digest))
    assert moved == 1
    record = await store.conversation(mine)
    assert record is not None and record.user_id == digest
    # A re-run after a crash finds the conversation by the digest.
    assert await run_write(store.engine, lambda c: erasure.conversation_ids(c, [user, digest])) == [
        mine
    ]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def own_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ConversationStore]:
    """A store of its own: retention touches every row of the database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    else:
        url = str(request.getfixturevalue("fresh_pg_url"))
    opened = await ConversationStore.open(url)
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_retention_counts_in_a_dry_run_and_erases_only_what_is_older(
    own_store: ConversationStore,
) -> None:
    store = own_store
    conv = await _conversation(store, f"u-{uuid.uuid4().hex[:8]}")
    before = {m.content for m in await store.messages(conv)}
    past = utcnow() - timedelta(days=1)
    future = utcnow() + timedelta(days=1)

    none = await run_write(store.engine, lambda c: erasure.age_out(c, past, dry_run=True))
    assert none == {"messages": 0, "summaries": 0, "outcomes": 0, "feedback": 0}
    assert (await run_write(store.engine, lambda c: erasure.age_out(c, past))) == none
    dry = await run_write(store.engine, lambda c: erasure.age_out(c, future, dry_run=True))
    assert dry["messages"] == 2 and {m.content for m in await store.messages(conv)} == before
    done = await run_write(store.engine, lambda c: erasure.age_out(c, future))
    assert done["messages"] == dry["messages"]
    assert {m.content for m in await store.messages(conv)} == {erasure.ERASED}
    assert (await run_write(store.engine, lambda c: erasure.age_out(c, future)))["messages"] == 0
