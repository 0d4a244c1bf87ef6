"""Conversations have owners: a call naming another user finds nothing, before any model call."""

from __future__ import annotations

from typing import Any

import pytest

from frontdesk import SyncOrchestrator
from frontdesk.errors import ConversationNotFound, MessageNotFound
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.orchestrator import Orchestrator

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, db_url: str) -> str:
    """A SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_pg_url"))
    return db_url


async def test_another_user_reaches_nothing_and_nothing_is_sent_to_a_model(
    team: Any, url: str
) -> None:
    orch = Orchestrator(potato_categories(), model=team.model(), store=url)
    first = await orch.handle("alice-1", "my card ends 4242", user_id="alice")
    calls = _calls(team)
    store = (await orch.open()).store
    conversation = await store.conversation("alice-1")
    assert conversation is not None and conversation.user_id == "alice"

    for user in ("mallory", None):  # Another user, and single-user mode.
        with pytest.raises(ConversationNotFound) as caught:
            await orch.handle("alice-1", "what did I say?", user_id=user)
        assert caught.value.conversation_id == "alice-1"
        with pytest.raises(ConversationNotFound):
            await orch.handle("alice-1", "again", user_id=user, client_message_id="m-9")
        with pytest.raises(ConversationNotFound):
            async for _event in orch.stream("alice-1", "stream it", user_id=user):
                pass
        with pytest.raises(ConversationNotFound):
            await orch.transcript("alice-1", user_id=user)
        with pytest.raises(ConversationNotFound):
            await orch.user_thread("alice-1", user_id=user)
        with pytest.raises(ConversationNotFound):
            await orch.branches("alice-1", user_id=user)
        with pytest.raises(ConversationNotFound):
            await orch.switch_branch("alice-1", first.user_message_id, user_id=user)
        with pytest.raises(ConversationNotFound):
            await orch.edit(first.user_message_id, "edited", user_id=user)
        with pytest.raises(ConversationNotFound):
            await orch.regenerate(first.message_id, user_id=user)

    assert _calls(team) == calls, "another user's call reached a model"
    transcript = await orch.transcript("alice-1", user_id="alice")
    assert [m.content for m in transcript] == ["my card ends 4242", first.text]
    await orch.aclose()


async def test_a_probe_cannot_tell_a_missing_conversation_or_message_from_someone_elses(
    team: Any, url: str
) -> None:
    orch = Orchestrator(potato_categories(), model=team.model(), store=url)
    first = await orch.handle("alice-1", "hello", user_id="alice")

    def said(error: BaseException) -> tuple[type[BaseException], str]:
        return type(error), str(error).replace("alice-1", "X").replace("nope", "X")

    with pytest.raises(ConversationNotFound) as theirs:
        await orch.transcript("alice-1", user_id="mallory")
    with pytest.raises(ConversationNotFound) as missing:
        await orch.transcript("nope", user_id="mallory")
    assert said(theirs.value) == said(missing.value)

    with pytest.raises(ConversationNotFound) as theirs_message:
        await orch.edit(first.user_message_id, "x", user_id="mallory")
    with pytest.raises(ConversationNotFound) as missing_message:
        await orch.edit("0" * 36, "x", user_id="mallory")
    assert type(theirs_message.value) is type(missing_message.value)
    assert str(theirs_message.value).replace(first.user_message_id, "X") == str(
        missing_message.value
    ).replace("0" * 36, "X")
    assert theirs_message.value.conversation_id is None  # Never names Alice's conversation.

    # Mallory's own conversation, with Alice's message id: "no such message" either way.
    await orch.handle("mallory-1", "hi", user_id="mallory")
    with pytest.raises(MessageNotFound) as wrong_conversation:
        await orch.switch_branch("mallory-1", first.message_id, user_id="mallory")
    with pytest.raises(MessageNotFound) as no_message:
        await orch.switch_branch("mallory-1", "0" * 36, user_id="mallory")
    assert type(wrong_conversation.value) is type(no_message.value) is MessageNotFound
    await orch.aclose()


async def test_the_owner_uses_every_method_and_single_user_mode_keeps_its_own(
    team: Any, url: str
) -> None:
    orch = Orchestrator(potato_categories(), model=team.model(), store=url)
    first = await orch.handle("c", "hello", user_id="u-1")
    edited = await orch.edit(first.user_message_id, "hello again", user_id="u-1")
    again = await orch.regenerate(edited.message_id, user_id="u-1")
    assert {m.id for m in await orch.branches("c", user_id="u-1")} == {
        first.message_id,
        edited.message_id,
        again.message_id,
    }
    path = await orch.switch_branch("c", first.message_id, user_id="u-1")
    assert [m.id for m in path][-1] == first.message_id
    assert (await orch.user_thread("c", user_id="u-1")).messages[-1].content == first.text

    solo = await orch.handle("solo", "no accounts here")  # Single-user mode: no owner.
    assert [m.id for m in await orch.transcript("solo")][-1] == solo.message_id
    with pytest.raises(ConversationNotFound):  # An owner cannot reach an ownerless one...
        await orch.transcript("solo", user_id="u-1")
    with pytest.raises(ConversationNotFound):  # ...nor single-user mode an owned one.
        await orch.transcript("c")
    await orch.aclose()


def test_the_sync_orchestrator_checks_the_owner_the_same_way(team: Any, db_url: str) -> None:
    with SyncOrchestrator(potato_categories(), model=team.model(), store=db_url) as orch:
        first = orch.handle("c", "hello", user_id="u-1")
        calls = _calls(team)
        with pytest.raises(ConversationNotFound):
            orch.handle("c", "hello", user_id="u-2")
        with pytest.raises(ConversationNotFound):
            orch.edit(first.user_message_id, "x", user_id="u-2")
        with pytest.raises(ConversationNotFound):
            orch.regenerate(first.message_id, user_id="u-2")
        for read in (orch.transcript, orch.user_thread, orch.branches):
            with pytest.raises(ConversationNotFound):
                read("c", user_id="u-2")
        with pytest.raises(ConversationNotFound):
            orch.switch_branch("c", first.message_id, user_id="u-2")
        assert _calls(team) == calls
        assert [m.id for m in orch.branches("c", user_id="u-1")] == [first.message_id]
        assert orch.switch_branch("c", first.user_message_id, user_id="u-1")[-1].id == (
            first.message_id
        )


def _calls(team: Any) -> int:
    """Model calls of the turns (the memory expert of the owner's own turn runs after it)."""
    return sum(1 for call in team.calls if call.expert != "memory")
