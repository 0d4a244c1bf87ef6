"""`Orchestrator.stream` and `SyncOrchestrator.stream`: typed events, faults, early stops."""

from __future__ import annotations

from typing import Any

import pytest

from frontdesk.errors import ModelConnectionError, ProviderOverloaded
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import ModelRequest, StreamCut
from frontdesk.orchestrator import (
    EmptyMessage,
    Orchestrator,
    SyncOrchestrator,
    TurnEvent,
    TurnFailed,
)
from frontdesk.orchestrator.stream import Delta, Done, Extracted, Failed, Routed

pytestmark = pytest.mark.anyio

LONG = (
    "Thanks! I have one bag of purple potatoes for you. Shall I place the order now?"
    " It ships tomorrow morning, and you will get a tracking number by email."
)


def ordering(team: Any) -> None:
    team.route = lambda r: "ORDERS"
    team.extract = lambda r: {"request": {"variety": "purple", "bags": 1}}
    team.reply_for = lambda r: LONG


async def collect(orch: Orchestrator, text: str, **kwargs: Any) -> list[TurnEvent]:
    return [event async for event in orch.stream("c", text, **kwargs)]


def joined(events: list[TurnEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, Delta))


async def test_a_turn_streams_routed_extracted_deltas_then_done(team: Any, db_url: str) -> None:
    ordering(team)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)

    events = await collect(orch, "a bag of purple please", client_message_id="m-1")
    transcript = await orch.transcript("c")
    await orch.aclose()

    kinds = [e.type for e in events]
    assert kinds[:2] == ["routed", "extracted"] and kinds[-1] == "done"
    assert set(kinds[2:-1]) == {"delta"} and len(kinds[2:-1]) > 3  # the provider's chunks
    routed, extracted, done = events[0], events[1], events[-1]
    assert isinstance(routed, Routed) and routed.category == "ORDERS"
    assert isinstance(extracted, Extracted) and extracted.need_more_info is None
    assert extracted.request is not None and extracted.request.model_dump()["variety"] == "purple"
    assert isinstance(done, Done)
    assert joined(events) == done.reply.text == LONG
    assert done.reply.category == "ORDERS" and not done.reply.replayed
    assert [(m.role, m.content) for m in transcript][-1] == ("assistant", LONG)


async def test_a_route_without_a_handler_has_no_extracted_event(team: Any, db_url: str) -> None:
    team.reply_for = lambda r: LONG
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    events = await collect(orch, "hello there")
    await orch.aclose()
    assert events[0] == Routed(category="OTHER")
    assert "extracted" not in [e.type for e in events]
    assert isinstance(events[-1], Done) and joined(events) == events[-1].reply.text


async def test_whitespace_around_the_reply_is_never_streamed(team: Any, db_url: str) -> None:
    team.reply_for = lambda r: "\n  " + LONG + "  \n"
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    events = await collect(orch, "hello there")
    await orch.aclose()
    assert isinstance(events[-1], Done)
    assert joined(events) == events[-1].reply.text == LONG


async def test_a_cut_after_the_first_delta_fails_and_a_retry_stores_one_reply(
    team: Any, db_url: str
) -> None:
    ordering(team)
    cut = StreamCut(text=LONG[:40], error=ModelConnectionError("connection dropped"))
    replies = iter([cut, LONG])
    team.reply_for = lambda r: next(replies)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)

    events = await collect(orch, "a bag of purple please", client_message_id="m-1")
    after_failure = await orch.transcript("c")
    retried = await collect(orch, "a bag of purple please", client_message_id="m-1")
    transcript = await orch.transcript("c")
    branches = await orch.branches("c")
    await orch.aclose()

    assert "done" not in [e.type for e in events]
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.partial
    assert isinstance(failed.error, TurnFailed) and failed.safe_reply == failed.error.safe_reply
    assert joined(events) == LONG[:40]
    # The partial text is not stored: the failed turn's marker holds the safe reply.
    assert [(m.role, m.failed, m.content) for m in after_failure] == [
        ("user", False, "a bag of purple please"),
        ("assistant", True, failed.safe_reply),
    ]
    done = retried[-1]
    assert isinstance(done, Done) and joined(retried) == done.reply.text == LONG
    assert [(m.role, m.content) for m in transcript] == [
        ("user", "a bag of purple please"),
        ("assistant", LONG),
    ]
    assert len(branches) == 1


async def test_an_outage_before_any_text_fails_without_partial(team: Any, db_url: str) -> None:
    def reply_for(request: ModelRequest) -> str:
        raise ProviderOverloaded("overloaded", status_code=529)

    team.reply_for = reply_for
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    events = await collect(orch, "hello there")
    await orch.aclose()
    assert [e.type for e in events] == ["routed", "failed"]
    failed = events[-1]
    assert isinstance(failed, Failed) and not failed.partial and failed.safe_reply


async def test_a_replayed_turn_streams_its_stored_text_then_done(team: Any, db_url: str) -> None:
    ordering(team)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    first = await orch.handle("c", "a bag of purple please", client_message_id="m-1")
    calls = len(team.calls)
    events = await collect(orch, "a bag of purple please", client_message_id="m-1")
    await orch.aclose()
    assert [e.type for e in events] == ["delta", "done"]
    done = events[-1]
    assert isinstance(done, Done) and done.reply.replayed
    assert joined(events) == done.reply.text == first.text
    assert len(team.calls) == calls


async def test_bad_text_is_raised_as_handle_raises_it(team: Any, db_url: str) -> None:
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    with pytest.raises(EmptyMessage):
        await collect(orch, "   ")
    await orch.aclose()


async def test_a_consumer_that_stops_reading_still_gets_the_reply_stored(
    team: Any, db_url: str
) -> None:
    ordering(team)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    stream = orch.stream("c", "a bag of purple please", client_message_id="m-1")
    async for event in stream:
        if isinstance(event, Delta):
            break  # the client went away
    await stream.aclose()
    await orch.aclose()  # waits for the turn it left running

    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    transcript = await orch.transcript("c")
    again = await orch.handle("c", "a bag of purple please", client_message_id="m-1")
    nxt = await orch.handle("c", "thanks")  # the lease was given back
    await orch.aclose()
    assert [(m.role, m.content) for m in transcript] == [
        ("user", "a bag of purple please"),
        ("assistant", LONG),
    ]
    assert again.replayed and again.text == LONG
    assert nxt.text


def test_sync_stream_is_a_plain_iterator(team: Any, db_url: str) -> None:
    ordering(team)
    with SyncOrchestrator(potato_categories(), model=team.model(), store=db_url) as orch:
        events = list(orch.stream("c", "a bag of purple please"))
        assert [e.type for e in events][:2] == ["routed", "extracted"]
        done = events[-1]
        assert isinstance(done, Done) and joined(events) == done.reply.text == LONG
        # Stopping early waits for the turn: its reply is stored when the iterator closes.
        stream = orch.stream("c", "and one of idaho")
        for event in stream:
            if isinstance(event, Delta):
                break
        stream.close()  # type: ignore[attr-defined]
        transcript = orch.transcript("c")
    assert [m.role for m in transcript] == ["user", "assistant", "user", "assistant"]
