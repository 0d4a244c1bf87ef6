"""A turn's writes: the lease rides in the first and last transactions; the thread read
stops at the newest summary's cut point. On SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import Connection

from frontdesk._driver.tx import run_sync_tx
from frontdesk.errors import ConversationBusy, IdempotencyConflict
from frontdesk.threads import _lease, _outcomes
from frontdesk.threads.builder import build_thread, thread_since
from frontdesk.threads.models import TurnOutcomeRow
from frontdesk.threads.store import ConversationStore, MessageRecord, TurnOutcome
from frontdesk.threads.summaries import SummaryRecord, SummaryStore, path_since_newest_sync

pytestmark = pytest.mark.anyio

_out = TurnOutcomeRow.__table__  # type: ignore[attr-defined]


def conv_id() -> str:
    """A conversation id no other test uses (the PostgreSQL database is shared)."""
    return f"turn-{uuid.uuid4().hex[:12]}"


async def chat(store: ConversationStore, conversation: str, n: int) -> list[MessageRecord]:
    """`n` exchanges; returns the messages, root first."""
    out: list[MessageRecord] = []
    for i in range(n):
        user, _ = await store.add_user_message(conversation, f"question {i}")
        out += [user, await store.add_assistant_message(user.id, f"answer {i}")]
    return out


async def busy(store: ConversationStore, conversation: str) -> bool:
    """Whether another turn would find the conversation held."""
    try:
        async with store.conversation_lock(conversation, timeout=0.05):
            return False
    except ConversationBusy:
        return True


async def test_a_turn_holds_the_lease_from_its_first_write_to_its_last(
    store: ConversationStore,
) -> None:
    conversation = conv_id()
    lease = store.turn_lease(conversation, timeout=5)
    start = await store.start_turn(conversation, "hello", lease=lease, client_message_id="m-1")
    assert start.created and lease.held
    assert start.path is not None and [m.content for m in start.path.messages] == ["hello"]
    assert await busy(store, conversation)
    reply = store.stage_reply(start.message, "hi there")
    assert await store.active_leaf(conversation) == start.message  # Staged, not written.
    await store.finish_turn(lease, reply)
    assert not lease.held
    assert not await busy(store, conversation)
    assert await store.active_leaf(conversation) == reply
    assert [m.content for m in await store.path(reply.id)] == ["hello", "hi there"]


async def test_an_idempotent_repeat_returns_the_stored_message_under_the_lease(
    store: ConversationStore,
) -> None:
    conversation = conv_id()
    first = store.turn_lease(conversation)
    start = await store.start_turn(conversation, "hello", lease=first, client_message_id="m-1")
    await first.aclose()
    again = store.turn_lease(conversation)
    repeat = await store.start_turn(conversation, "hello", lease=again, client_message_id="m-1")
    assert not repeat.created and repeat.message == start.message and again.held
    assert repeat.path is None  # A repeat reads no path (it may be answered already).
    await again.aclose()
    other = store.turn_lease(conversation)
    with pytest.raises(IdempotencyConflict):
        await store.start_turn(conversation, "bye", lease=other, client_message_id="m-1")
    assert not other.held  # The failed first write took no lease.
    assert not await busy(store, conversation)


async def test_a_failed_last_write_writes_nothing_and_keeps_the_lease(
    store: ConversationStore,
) -> None:
    conversation = conv_id()
    lease = store.turn_lease(conversation)
    start = await store.start_turn(conversation, "hello", lease=lease)
    reply = store.stage_reply(start.message, "hi")

    def broken_audit(conn: Connection, opened: object) -> None:
        raise RuntimeError("audit batch refused")

    with pytest.raises(RuntimeError):
        await store.finish_turn(lease, reply, also=broken_audit)
    assert lease.held and await busy(store, conversation)
    assert await store.active_leaf(conversation) == start.message
    await store.finish_turn(lease, reply, release=False)  # The reply alone; lease kept.
    assert lease.held and await store.active_leaf(conversation) == reply
    await lease.aclose()
    assert not await busy(store, conversation)


async def test_turns_queue_on_the_lease_and_a_waiter_times_out(
    store: ConversationStore,
) -> None:
    conversation = conv_id()
    holder = store.turn_lease(conversation)
    await store.start_turn(conversation, "first", lease=holder)
    waiter = store.turn_lease(conversation, timeout=0.2)
    started = time.monotonic()
    with pytest.raises(ConversationBusy):
        await store.start_turn(conversation, "second", lease=waiter)
    assert 0.2 <= time.monotonic() - started < 2
    assert [m.content for m in await store.messages(conversation)] == ["first"]
    await holder.aclose()


async def test_a_waiter_in_the_same_process_wakes_when_the_holder_lets_go(
    store: ConversationStore,
) -> None:
    name = f"conversation:{conv_id()}"
    woke = 0.0

    async def wait() -> None:
        nonlocal woke
        await _lease._until_released(store.engine, name, 10.0)
        woke = time.monotonic()

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await anyio.sleep(0.05)
        assert await store.try_lease(name, "holder", ttl=30)
        released = time.monotonic()
        await store.release_lease(name, "holder")
    assert woke - released < 1.0  # Not the 10 s it would otherwise sleep.


async def test_the_thread_read_stops_at_the_newest_cut_and_counts_what_it_replaced(
    store: ConversationStore,
) -> None:
    conversation = conv_id()
    path = await chat(store, conversation, 4)
    question, _ = await store.add_user_message(conversation, "and now?")
    summaries = SummaryStore(store.engine)
    await summaries.add(
        conversation_id=conversation,
        covers_until_message_id=path[1].id,
        content="S1",
        token_count=1,
        covered_messages=2,
    )
    await summaries.add(
        conversation_id=conversation,
        covers_until_message_id=path[5].id,
        content="S2",
        token_count=1,
        covered_messages=6,
    )
    since = await summaries.path_since_newest(question.id)
    assert since.summary is not None and since.summary.content == "S2"
    assert [m.content for m in since.messages] == ["question 3", "answer 3", "and now?"]
    assert since.replaced == 6
    thread = thread_since(since)
    assert thread == await build_thread(store, question.id)
    # The same thread as the walk to the root gives (a custom summary source).
    walked = await build_thread(store, question.id, summaries=_Wrapped(summaries))
    assert walked == thread


async def test_a_summary_without_its_count_is_counted_from_the_root(
    store: ConversationStore,
) -> None:
    conversation = conv_id()
    path = await chat(store, conversation, 3)
    await SummaryStore(store.engine).add(
        conversation_id=conversation,
        covers_until_message_id=path[3].id,
        content="old",
        token_count=1,
    )
    thread = await build_thread(store, path[-1].id)
    assert (thread.summary, thread.replaced) == ("old", 4)
    assert [m.content for m in thread.messages] == ["question 2", "answer 2"]


async def test_the_thread_read_does_not_grow_with_the_transcript_above_the_cut(
    tmp_path: Path,
) -> None:
    # SQLite's progress handler counts the work the query does (PostgreSQL runs the same SQL).
    store = await ConversationStore.open(f"sqlite:///{tmp_path / 'walk.db'}")
    work: dict[int, int] = {}
    try:
        for exchanges in (3, 60):
            conversation = conv_id()
            path = await chat(store, conversation, exchanges)
            await SummaryStore(store.engine).add(
                conversation_id=conversation,
                covers_until_message_id=path[-3].id,
                content="summary",
                token_count=1,
                covered_messages=len(path) - 2,
            )
            steps = 0

            def count() -> int:
                nonlocal steps
                steps += 1
                return 0

            async with store.engine.connect() as conn:
                raw = (await conn.get_raw_connection()).driver_connection
                assert raw is not None
                await raw.set_progress_handler(count, 20)
                since = await conn.run_sync(path_since_newest_sync, path[-1].id)
                await raw.set_progress_handler(None, 20)
            assert since.replaced == len(path) - 2
            assert [m.content for m in since.messages] == [
                f"question {exchanges - 1}",
                f"answer {exchanges - 1}",
            ]
            work[exchanges] = steps
    finally:
        await store.aclose()
    # 20x the transcript above the cut, about the same work (a walk to the root: ~20x).
    assert work[60] <= 2 * work[3] + 10, work


class _Wrapped:
    """A summary source that is not the store's own (so the builder walks to the root)."""

    def __init__(self, inner: SummaryStore) -> None:
        self.inner = inner

    async def newest_on_path(
        self, conversation_id: str, path_ids: Sequence[str]
    ) -> SummaryRecord | None:
        return await self.inner.newest_on_path(conversation_id, path_ids)


async def test_a_start_after_a_crashed_turn_answers_its_question_first(
    store: ConversationStore,
) -> None:
    # The start reads the leaf's role with the conversation's lock (issue 47): a question
    # left unanswered still gets its failed marker before the next message, a retry of
    # that very question does not.
    conversation = conv_id()
    crashed = store.turn_lease(conversation, timeout=5)
    first = await store.start_turn(conversation, "q1", lease=crashed, client_message_id="m-1")
    await crashed.aclose()  # Crashed before any reply.
    retry = store.turn_lease(conversation, timeout=5)
    again = await store.start_turn(conversation, "q1", lease=retry, client_message_id="m-1")
    assert not again.created and again.message == first.message
    await retry.aclose()
    assert await store.active_leaf(conversation) == first.message  # No marker for a retry.
    lease = store.turn_lease(conversation, timeout=5)
    start = await store.start_turn(conversation, "q2", lease=lease, client_message_id="m-2")
    assert start.path is not None
    path = start.path.messages
    assert [(m.role, m.kind) for m in path] == [
        ("user", "message"),
        ("assistant", "failed"),
        ("user", "message"),
    ]
    assert path[0] == first.message and path[1].parent_id == first.message.id
    assert start.previous is not None and start.previous.user_message_id == first.message.id
    assert start.previous.category is None  # Its turn stored no outcome.
    await store.finish_turn(lease, store.stage_reply(start.message, "a2"))


async def test_the_turn_before_and_the_finish_after_an_early_outcome(
    store: ConversationStore,
) -> None:
    # The start reads the turn before's route with the lock; the finish after the early
    # save changes only what the upsert would change (usage, models, sources, flow), and
    # stores the whole outcome when the early one is gone after all.
    conversation = conv_id()
    lease = store.turn_lease(conversation, timeout=5)
    start = await store.start_turn(conversation, "q1", lease=lease, client_message_id="m-1")
    early = TurnOutcome(
        user_message_id=start.message.id,
        conversation_id=conversation,
        category="BILLING",
        instruction="Say it is refunded.",
        handler_ran=True,
        usage={"triage": {"input_tokens": 3}},
        confirmation={"asked": True},
        flow={"step": 1},
    )
    await store.save_outcome(early, lease=lease)
    final = dataclasses.replace(
        early, category="OTHER", usage={"response": {"input_tokens": 9}}, flow={"step": 2}
    )
    await store.finish_turn(lease, store.stage_reply(start.message, "a1"), outcome=final)
    stored = (await store.turn_record(start.message.id)).outcome
    assert stored is not None
    assert (stored.category, stored.usage, stored.flow, stored.confirmation) == (
        "BILLING",
        {"response": {"input_tokens": 9}},
        {"step": 2},
        {"asked": True},
    )

    lease = store.turn_lease(conversation, timeout=5)
    second = await store.start_turn(conversation, "q2", lease=lease, client_message_id="m-2")
    assert second.previous_category == "BILLING"
    assert second.previous is not None
    assert (second.previous.user_message_id, second.previous.flow) == (
        start.message.id,
        {"step": 2},
    )
    assert second.previous.confirmation == {"asked": True}
    await store.save_outcome(
        dataclasses.replace(early, user_message_id=second.message.id), lease=lease
    )

    def gone(conn: Connection) -> None:  # As if erased meanwhile.
        conn.execute(sa.delete(_out).where(_out.c.user_message_id == second.message.id))

    await run_sync_tx(store.engine, gone)
    final = dataclasses.replace(final, user_message_id=second.message.id)
    await store.finish_turn(lease, store.stage_reply(second.message, "a2"), outcome=final)
    stored = (await store.turn_record(second.message.id)).outcome
    assert stored is not None and (stored.category, stored.flow) == ("OTHER", {"step": 2})


async def test_the_outcome_updates_run_through_sqlalchemy_too(store: ConversationStore) -> None:
    # Off the driver (the async engine's connection, as under a cursor listener such as a
    # tracer) the statements go through `Connection.execute`, where an UPDATE's binds must
    # not be named after its table's columns (the confirmation's were: a CompileError).
    conversation = conv_id()
    lease = store.turn_lease(conversation, timeout=5)
    start = await store.start_turn(conversation, "q1", lease=lease, client_message_id="m-1")
    outcome = TurnOutcome(
        user_message_id=start.message.id,
        conversation_id=conversation,
        category="BILLING",
        instruction="Say it is refunded.",
        confirmation={"asked": True},
    )
    await store.save_outcome(outcome, lease=lease)
    await store.finish_turn(lease, store.stage_reply(start.message, "a1"))
    again = dataclasses.replace(outcome, usage={"response": {"input_tokens": 9}})
    async with store.engine.begin() as conn:
        await conn.run_sync(
            lambda c: _outcomes.set_confirmation(c, start.message.id, {"answered": "yes"})
        )
        await conn.run_sync(lambda c: _outcomes.save(c, again, stored=True))
    stored = (await store.turn_record(start.message.id)).outcome
    assert stored is not None
    assert stored.confirmation == {"answered": "yes"}
    assert stored.usage == {"response": {"input_tokens": 9}}
