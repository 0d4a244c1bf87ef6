"""Stored summaries and the thread built from them, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from frontdesk.threads.budget import Budget
from frontdesk.threads.builder import SUMMARY_LABEL, build_thread
from frontdesk.threads.store import ConversationStore, MessageRecord
from frontdesk.threads.summaries import SummaryStore

pytestmark = pytest.mark.anyio


def conv_id() -> str:
    """A conversation id no other test uses (the PostgreSQL database is shared)."""
    return f"sum-{uuid.uuid4().hex[:12]}"


async def chat(store: ConversationStore, conversation: str, n: int) -> list[MessageRecord]:
    """`n` exchanges; returns the messages, root first."""
    out: list[MessageRecord] = []
    for i in range(n):
        user, _ = await store.add_user_message(conversation, f"question {i}")
        out += [user, await store.add_assistant_message(user.id, f"answer {i}")]
    return out


async def test_thread_is_the_summary_then_the_path_after_its_cut(
    store: ConversationStore,
) -> None:
    conversation = conv_id()
    path = await chat(store, conversation, 4)
    question, _ = await store.add_user_message(conversation, "and now?")
    summaries = SummaryStore(store.engine)
    summary, created = await summaries.add(
        conversation_id=conversation,
        covers_until_message_id=path[3].id,
        content="Priya, order 88213.",
        token_count=6,
    )
    assert created
    thread = await build_thread(store, question.id)
    assert thread.summary == "Priya, order 88213."
    assert thread.summary_id == summary.id
    assert thread.covers_until_message_id == path[3].id
    assert thread.replaced == 4
    assert [m.message_id for m in thread.messages] == [*(m.id for m in path[4:]), question.id]
    sent = thread.as_messages()
    assert sent[0] == {"role": "user", "content": f"{SUMMARY_LABEL}\nPriya, order 88213."}
    assert sent[-1] == {"role": "user", "content": "and now?"}
    # Everything but the question is the stable, cacheable prefix.
    assert thread.cache_prefix_messages == len(sent) - 1
    # The transcript is untouched.
    assert len(await store.path(question.id)) == 9


async def test_the_deepest_cut_on_the_path_wins_and_a_cut_is_stored_once(
    store: ConversationStore,
) -> None:
    conversation = conv_id()
    path = await chat(store, conversation, 4)
    summaries = SummaryStore(store.engine)
    first, _ = await summaries.add(
        conversation_id=conversation,
        covers_until_message_id=path[1].id,
        content="one",
        token_count=1,
    )
    second, _ = await summaries.add(
        conversation_id=conversation,
        covers_until_message_id=path[5].id,
        content="two",
        token_count=1,
        previous_summary_id=first.id,
    )
    again, created = await summaries.add(
        conversation_id=conversation,
        covers_until_message_id=path[5].id,
        content="late",
        token_count=1,
    )
    assert not created and again == second
    found = await summaries.newest_on_path(conversation, [m.id for m in path])
    assert found == second and found.previous_summary_id == first.id
    assert [s.id for s in await summaries.for_conversation(conversation)] == [first.id, second.id]
    assert await summaries.newest_on_path(conversation, []) is None


async def test_branches_share_a_summarised_prefix_and_an_edit_inside_it_does_not(
    store: ConversationStore,
) -> None:
    conversation = conv_id()
    path = await chat(store, conversation, 3)  # u0 a0 u1 a1 u2 a2
    summaries = SummaryStore(store.engine)
    await summaries.add(
        conversation_id=conversation,
        covers_until_message_id=path[3].id,
        content="S",
        token_count=1,
    )
    # An edit of the last question branches after the cut: it shares the summary.
    after, _ = await store.add_user_message(conversation, "edited q2", parent_id=path[3].id)
    shared = await build_thread(store, after.id)
    assert shared.summary == "S"
    assert [m.content for m in shared.messages] == ["edited q2"]
    # An edit of question 1 branches inside the summarised prefix: no summary of its own yet.
    inside, _ = await store.add_user_message(conversation, "edited q1", parent_id=path[1].id)
    own = await build_thread(store, inside.id)
    assert own.summary is None
    assert [m.content for m in own.messages] == ["question 0", "answer 0", "edited q1"]
    # Its own compaction gives it its own summary, and the first branch keeps its one.
    await summaries.add(
        conversation_id=conversation,
        covers_until_message_id=path[1].id,
        content="B",
        token_count=1,
    )
    assert (await build_thread(store, inside.id)).summary == "B"
    assert (await build_thread(store, after.id)).summary == "S"


async def test_each_expert_reads_the_thread_through_its_budget(store: ConversationStore) -> None:
    conversation = conv_id()
    path = await chat(store, conversation, 6)
    question, _ = await store.add_user_message(conversation, "where is my refund?")
    await SummaryStore(store.engine).add(
        conversation_id=conversation,
        covers_until_message_id=path[3].id,
        content="order 88213",
        token_count=3,
    )
    thread = await build_thread(store, question.id)
    small = {"triage": Budget(system=100, history=35, question=100, answer=10)}
    triage = thread.for_expert("triage", budgets=small)
    request = thread.for_expert("request")
    # The request expert gets everything, with the prefix marked cacheable.
    assert request.messages == thread.as_messages()
    assert request.cache_prefix_messages == len(request.messages) - 1
    # Triage gets the summary and the newest whole exchange; a cut prefix is not cached.
    assert [m["content"] for m in triage.messages[1:]] == [
        "question 5",
        "answer 5",
        "where is my refund?",
    ]
    assert triage.messages[0]["content"].endswith("order 88213")
    assert triage.fit.dropped_exchanges == 3
    assert triage.cache_prefix_messages == 0
