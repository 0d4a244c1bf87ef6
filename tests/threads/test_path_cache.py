"""A turn's start reuses the path its process read the turn before (`threads/_path_cache.py`)
only while nothing can have changed it: an erasure, a compaction, a scrub, another
process's turn or a start that rolled back each make the next start read it again, and
what it serves is what a fresh read gives. On SQLite and PostgreSQL (whose usual start
is its own function, told the path kept: revision 0038)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import Connection

from frontdesk._driver.tx import run_sync_tx
from frontdesk.threads import _server_turn, erasure, summaries
from frontdesk.threads import store as store_module
from frontdesk.threads._outcomes import TurnOutcome
from frontdesk.threads.ruled_values import Scrub
from frontdesk.threads.store import ConversationStore, TurnStart
from frontdesk.threads.summaries import PathSinceSummary, SummaryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The messages whose path a start read from the database (rather than its cache): on
    SQLite the store's read, on PostgreSQL its function's walk (`path_known` false)."""
    seen: list[str] = []
    real = summaries.path_since_newest_sync
    real_start = _server_turn.start

    def counting(conn: Connection, leaf_id: str) -> PathSinceSummary:
        seen.append(leaf_id)
        return real(conn, leaf_id)

    def starting(*args: Any, **kwargs: Any) -> Any:
        token, done = real_start(*args, **kwargs)
        if done is not None and not done.path_known:
            seen.append(done.message.id)
        return token, done

    monkeypatch.setattr(store_module, "path_since_newest_sync", counting)
    monkeypatch.setattr(_server_turn, "start", starting)
    return seen


async def turn(store: ConversationStore, conversation: str, text: str, **kw: Any) -> TurnStart:
    """One whole turn (start, then the reply `re: <text>`); returns its start."""
    lease = store.turn_lease(conversation, timeout=5)
    begun = await store.start_turn(conversation, text, lease=lease)
    await store.finish_turn(lease, store.stage_reply(begun.message, f"re: {text}"), **kw)
    return begun


async def fresh(store: ConversationStore, begun: TurnStart) -> PathSinceSummary:
    """The path to the start's message as the database has it now."""
    return await SummaryStore(store.engine).path_since_newest(begun.message.id)


def texts(path: PathSinceSummary | None) -> list[str]:
    assert path is not None
    return [m.content for m in path.messages]


def read(reads: list[str], begun: TurnStart) -> bool:
    """Whether the start read its path from the database rather than its cache."""
    return begun.message.id in reads


async def read_again(
    store: ConversationStore, reads: list[str], conversation: str, text: str
) -> TurnStart:
    """One turn whose start must read its path from the database (something changed it
    since the last start), and serve what a fresh read gives."""
    begun = await turn(store, conversation, text)
    assert read(reads, begun)
    assert begun.path == await fresh(store, begun)
    return begun


async def write_elsewhere(other: ConversationStore, work: Callable[[Connection], Any]) -> None:
    await run_sync_tx(other.engine, work)


async def test_a_warm_start_serves_the_path_a_fresh_read_gives(
    store: ConversationStore, reads: list[str]
) -> None:
    conversation = f"cache-{uuid.uuid4().hex[:12]}"
    await turn(store, conversation, "q1")
    second = await turn(store, conversation, "q2")
    third = await turn(store, conversation, "q3")
    assert not read(reads, second)
    assert not read(reads, third)
    assert third.path == await fresh(store, third)
    assert texts(third.path) == ["q1", "re: q1", "q2", "re: q2", "q3"]
    assert third.previous is not None and third.previous.user_message_id == second.message.id


async def test_a_start_from_the_kept_path_reads_the_turn_befores_stored_outcome(
    store: ConversationStore, reads: list[str]
) -> None:
    """The turn before is the kept path's last question; its category, confirmation and
    flow are read as stored now (PostgreSQL's function reads them beside the new message)."""
    conversation = f"cache-{uuid.uuid4().hex[:12]}"
    await turn(store, conversation, "q1")
    lease = store.turn_lease(conversation, timeout=5)
    asked = await store.start_turn(conversation, "refund A-1", lease=lease)
    outcome = TurnOutcome(
        user_message_id=asked.message.id,
        conversation_id=conversation,
        category="BILLING",
        instruction="Ask for the amount.",
        confirmation={"pending": {"order_id": "A-1"}},
        flow={"open": ["BILLING"]},
    )
    await store.finish_turn(lease, store.stage_reply(asked.message, "How much?"), outcome=outcome)
    after = await turn(store, conversation, "42 pounds")
    assert not read(reads, after)
    assert after.path == await fresh(store, after)
    assert after.previous is not None
    assert after.previous.user_message_id == asked.message.id
    assert after.previous.category == "BILLING"
    assert after.previous.confirmation == {"pending": {"order_id": "A-1"}}
    assert after.previous.flow == {"open": ["BILLING"]}


async def test_text_erased_by_another_process_is_never_served_from_the_cache(
    store: ConversationStore, other_store: ConversationStore, reads: list[str]
) -> None:
    conversation = f"cache-{uuid.uuid4().hex[:12]}"
    await turn(store, conversation, "my card is 4111")
    await turn(store, conversation, "q2")
    await write_elsewhere(
        other_store, lambda conn: erasure.erase_messages(conn, [conversation], "someone")
    )
    after = await read_again(store, reads, conversation, "q3")
    assert texts(after.path) == [erasure.ERASED] * 4 + ["q3"]


async def test_a_compaction_elsewhere_moves_the_cut_point_of_the_next_start(
    store: ConversationStore, other_store: ConversationStore, reads: list[str]
) -> None:
    conversation = f"cache-{uuid.uuid4().hex[:12]}"
    await turn(store, conversation, "q1")
    second = await turn(store, conversation, "q2")
    assert second.path is not None
    summary, _ = await SummaryStore(other_store.engine).add(
        conversation_id=conversation,
        covers_until_message_id=second.path.messages[-1].id,  # The question q2.
        content="S",
        token_count=1,
        covered_messages=3,
    )
    after = await read_again(store, reads, conversation, "q3")
    assert after.path is not None and after.path.summary == summary
    assert texts(after.path) == ["re: q2", "q3"] and after.path.replaced == 3
    # The summary's text erased: the next start reads it again, erased.
    await write_elsewhere(
        other_store, lambda conn: erasure.erase_summaries(conn, [conversation], "someone")
    )
    last = await read_again(store, reads, conversation, "q4")
    assert last.path is not None and last.path.summary is not None
    assert last.path.summary.content == erasure.ERASED


async def test_another_process_turn_and_a_scrub_make_the_next_start_read_again(
    store: ConversationStore, other_store: ConversationStore, reads: list[str]
) -> None:
    conversation = f"cache-{uuid.uuid4().hex[:12]}"
    await turn(store, conversation, "q1")
    await turn(other_store, conversation, "q2")  # Another process answers: the leaf moved.
    third = await read_again(store, reads, conversation, "q3")
    assert texts(third.path) == ["q1", "re: q1", "q2", "re: q2", "q3"]
    # This process's own finish rewrites its question (a ruled value scrubbed).
    lease = store.turn_lease(conversation, timeout=5)
    begun = await store.start_turn(conversation, "pin 1234", lease=lease)
    scrub = Scrub(message_id=begun.message.id, rows=[], content="pin [redacted]")
    await store.finish_turn(lease, store.stage_reply(begun.message, "ok"), scrub=scrub)
    after = await read_again(store, reads, conversation, "q5")
    assert texts(after.path)[-3:] == ["pin [redacted]", "ok", "q5"]


async def test_a_start_that_rolled_back_is_not_kept(store: ConversationStore) -> None:
    conversation = f"cache-{uuid.uuid4().hex[:12]}"
    await turn(store, conversation, "q1")

    def broken(_conn: Connection, _begun: TurnStart) -> None:
        raise RuntimeError("the audit batch failed")

    lease = store.turn_lease(conversation, timeout=5)
    with pytest.raises(RuntimeError):
        await store.start_turn(conversation, "lost", lease=lease, also=broken)
    await lease.aclose()
    after = await turn(store, conversation, "q2")  # The path kept by q1's finish holds.
    assert after.path == await fresh(store, after)
    if store.engine.dialect.name == "sqlite":  # PostgreSQL's one call ran before `also`.
        assert texts(after.path) == ["q1", "re: q1", "q2"]
