"""Effects at most once per turn: stored outcomes, the same Reply on retry, failed-turn markers."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sqlalchemy import event

from frontdesk.errors import ProviderOverloaded, StoreUnavailable, StreamInterrupted
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator, Reply, TurnFailed
from frontdesk.orchestrator.fallbacks import plain_reply
from frontdesk.orchestrator.turn import idempotency_key
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio


def confirmed_order(team: FakeTeam) -> None:
    team.route = lambda r: "ORDERS"
    team.extract = lambda r: {"request": {"variety": "purple", "bags": 2, "confirmed": True}}


class Outage:
    """The response expert's stream breaks after its first words while `down` is set (the
    other experts answer): the one failure of the reply, after the handler acted, that
    still fails the turn (a 529 falls back to a plain reply)."""

    def __init__(self, team: FakeTeam) -> None:
        self.team = team
        self.down = True

    def __call__(self, request: ModelRequest) -> Any:
        if self.down and request.expert == "response":
            cause = ProviderOverloaded("overloaded", status_code=529, model="fake", attempts=1)
            raise StreamInterrupted(
                "the stream broke", partial_text="Your order", cause=cause, model="fake"
            )
        return self.team(request)


async def orders_placed(orch: Orchestrator, conversation_id: str = "c") -> list[Any]:
    """The orders placed in `conversation_id` (the shop's orders of no user are its own)."""
    shop = orch.store.handler_state("potato_shop", conversation_id=conversation_id, user_id=None)
    return [v for _, v in await shop.conversation.items("order:")]


async def waiting_order(orch: Orchestrator, conversation_id: str = "c") -> None:
    """The order `confirmed_order` confirms, waiting (the shop places only what it asked)."""
    await orch.open()
    pending = {"variety": "purple", "bags": 2, "total": 7.0}
    state = orch.store.handler_state("ORDERS", conversation_id=conversation_id, user_id=None)
    await state.conversation.put("pending", pending)


def same_reply(first: Reply, again: Reply) -> None:
    """Every field of the two replies is equal, but `replayed`."""
    for f in dataclasses.fields(Reply):
        if f.name != "replayed":
            assert getattr(again, f.name) == getattr(first, f.name), f.name
    assert again.handoff == first.handoff and again.tokens == first.tokens


async def test_a_529_in_the_response_call_falls_back_to_a_plain_reply_with_one_order(
    team: FakeTeam, db_url: str
) -> None:
    confirmed_order(team)

    def overloaded(request: ModelRequest) -> Any:
        if request.expert == "response":
            raise ProviderOverloaded("overloaded", status_code=529, model="fake", attempts=4)
        return team(request)

    orch = Orchestrator(potato_categories(), model=FunctionModel(overloaded), store=db_url)
    await waiting_order(orch)
    reply = await orch.handle("c", "yes, confirm", client_message_id="m-1")
    again = await orch.handle("c", "yes, confirm", client_message_id="m-1")
    orders = await orders_placed(orch)
    await orch.aclose()
    assert len(orders) == 1 and reply.outcome is not None
    assert reply.text == plain_reply(reply.outcome)
    assert "Tell the user" not in reply.text
    assert again.replayed and again.text == reply.text


async def test_a_broken_response_stream_then_the_retry_places_one_order(
    team: FakeTeam, any_url: str
) -> None:
    confirmed_order(team)
    outage = Outage(team)
    orch = Orchestrator(potato_categories(), model=FunctionModel(outage), store=any_url)
    await waiting_order(orch)
    with pytest.raises(TurnFailed) as failed:
        await orch.handle("c", "yes, confirm", client_message_id="m-1")
    assert failed.value.stage == "response"
    outage.down = False
    reply = await orch.handle("c", "yes, confirm", client_message_id="m-1")
    orders = await orders_placed(orch)
    await orch.aclose()
    assert len(orders) == 1  # main placed 2 here, and told the user about 1.
    assert reply.outcome is not None and reply.outcome.data["order"] == orders[0]
    assert len(team.of("triage")) == 1 and len(team.of("request")) == 1  # Never re-run.
    assert not reply.replayed and reply.category == "ORDERS"
    assert set(reply.usage) == set(reply.models) == {"triage", "request", "response"}


async def test_the_handler_is_given_a_key_that_is_the_same_on_every_try(
    team: FakeTeam, db_url: str
) -> None:
    keys: list[str] = []
    categories = potato_categories()
    orders = categories[0]
    place = orders.handler
    assert place is not None

    async def noting(request: Any, context: Any) -> Any:
        keys.append(context.idempotency_key)
        if len(keys) == 1:
            raise SystemExit("the process dies inside the handler")  # Not contained.
        return await place(request, context)

    categories[0] = dataclasses.replace(orders, handler=noting)
    confirmed_order(team)
    orch = Orchestrator(categories, model=team.model(), store=db_url)
    await waiting_order(orch)
    with pytest.raises(SystemExit):
        await orch.handle("c", "yes, confirm", client_message_id="m-1")
    reply = await orch.handle("c", "yes, confirm", client_message_id="m-1")
    await orch.handle("c", "yes, confirm", client_message_id="m-2")
    await orch.aclose()
    assert keys[0] == keys[1] == idempotency_key("c", reply.user_message_id)
    assert keys[2] != keys[0] and len(keys[0]) == 32


@pytest.mark.parametrize("route", ["HUMAN", "ORDERS", "OTHER"])
async def test_a_retried_turn_returns_the_same_reply(
    team: FakeTeam, db_url: str, route: str
) -> None:
    confirmed_order(team)
    team.route = lambda r: route
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    await waiting_order(orch)
    first = await orch.handle("c", "yes, confirm", client_message_id="m-1")
    again = await orch.handle("c", "yes, confirm", client_message_id="m-1")
    await orch.aclose()
    assert again.replayed and not first.replayed
    same_reply(first, again)
    assert first.handoff is (route == "HUMAN")  # main reported handoff=False on the retry.
    assert len(team.of("response")) == 1


async def test_a_finished_retry_replays_as_the_retry_answered(team: FakeTeam, db_url: str) -> None:
    confirmed_order(team)
    outage = Outage(team)
    orch = Orchestrator(potato_categories(), model=FunctionModel(outage), store=db_url)
    await waiting_order(orch)
    with pytest.raises(TurnFailed):
        await orch.handle("c", "yes, confirm", client_message_id="m-1")
    outage.down = False
    finished = await orch.handle("c", "yes, confirm", client_message_id="m-1")
    again = await orch.handle("c", "yes, confirm", client_message_id="m-1")
    await orch.aclose()
    same_reply(finished, again)


async def test_a_replay_reads_only_that_turns_records(team: FakeTeam, any_url: str) -> None:
    # `jobs="worker"`: no runner in this process, so a periodic job's statements (the idle
    # conversations' summaries) never land among the replay's (they did, now and then).
    orch = Orchestrator(potato_categories(), model=team.model(), store=any_url, jobs="worker")
    await orch.open()
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    async def replay_cost(conversation: str, turns: int) -> list[str]:
        for i in range(turns):
            await orch.handle(conversation, f"hello {i}", client_message_id=f"m-{i}")
        statements.clear()
        event.listen(orch.store.engine.sync_engine, "before_cursor_execute", seen)
        try:
            await orch.handle(conversation, "hello 0", client_message_id="m-0")
        finally:
            event.remove(orch.store.engine.sync_engine, "before_cursor_execute", seen)
        return list(statements)

    short = await replay_cost("short", 2)
    long = await replay_cost("long", 40)
    await orch.aclose()
    assert short == long  # The same statements at turn 2 and turn 40: flat.
    assert not [s for s in long if "audit" in s.lower() or "recursive" in s.lower()]


async def test_a_database_failure_in_the_last_transaction_is_a_turn_failure(
    team: FakeTeam, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    confirmed_order(team)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    await waiting_order(orch)
    await orch.open()
    finish = orch.store.finish_turn

    async def down(*args: Any, **kwargs: Any) -> None:
        raise StoreUnavailable("the database went away (connection refused)")

    monkeypatch.setattr(orch.store, "finish_turn", down)
    with pytest.raises(TurnFailed) as failed:
        await orch.handle("c", "yes, confirm", client_message_id="m-1")
    assert failed.value.stage == "finish" and "try again" in failed.value.safe_reply
    monkeypatch.setattr(orch.store, "finish_turn", finish)
    reply = await orch.handle("c", "yes, confirm", client_message_id="m-1")
    orders = await orders_placed(orch)
    transcript = await orch.transcript("c")
    await orch.aclose()
    assert len(orders) == 1 and len(team.of("request")) == 1  # The handler ran once.
    assert [(m.role, m.failed) for m in transcript] == [("user", False), ("assistant", False)]
    assert transcript[-1].id == reply.message_id


async def test_a_failed_turn_not_retried_leaves_the_thread_alternating(
    team: FakeTeam, db_url: str
) -> None:
    outage = Outage(team)
    outage.down = False
    orch = Orchestrator(potato_categories(), model=FunctionModel(outage), store=db_url)
    await orch.handle("c", "hello", client_message_id="m-1")
    outage.down = True
    with pytest.raises(TurnFailed) as failed:
        await orch.handle("c", "are you there?", client_message_id="m-2")
    outage.down = False
    third = await orch.handle("c", "hello again", client_message_id="m-3")
    transcript = await orch.transcript("c")
    sent = team.of("triage")[-1].messages
    assert [m.role[0].upper() for m in transcript] == list("UAUAUA")  # main: UAUUA.
    assert [m.failed for m in transcript] == [False, False, False, True, False, False]
    assert transcript[3].content == failed.value.safe_reply
    assert [m["role"][0].upper() for m in sent] == list("UAUAU")

    # The late retry of the failed message is answered beside the marker, off the path.
    late = await orch.handle("c", "are you there?", client_message_id="m-2")
    after = await orch.transcript("c")
    replayed = await orch.handle("c", "are you there?", client_message_id="m-2")
    await orch.aclose()
    assert not late.replayed and late.user_message_id == transcript[2].id
    assert [m.id for m in after] == [m.id for m in transcript]
    assert after[-1].id == third.message_id
    assert replayed.replayed and replayed.message_id == late.message_id


async def test_a_failure_then_a_retry_that_fails_again_leaves_one_marker(
    team: FakeTeam, db_url: str
) -> None:
    outage = Outage(team)
    orch = Orchestrator(potato_categories(), model=FunctionModel(outage), store=db_url)
    for _ in range(2):
        with pytest.raises(TurnFailed):
            await orch.handle("c", "hello", client_message_id="m-1")
    marked = await orch.transcript("c")
    outage.down = False
    reply = await orch.handle("c", "hello", client_message_id="m-1")
    transcript = await orch.transcript("c")
    everything = await orch.store.messages("c")
    await orch.aclose()
    assert [(m.role, m.failed) for m in marked] == [("user", False), ("assistant", True)]
    assert [m.id for m in transcript] == [reply.user_message_id, reply.message_id]
    assert len(everything) == 2  # The retry's reply took the marker's place.


async def test_a_message_whose_turn_crashed_is_answered_by_a_marker_before_the_next(
    team: FakeTeam, any_url: str
) -> None:
    """A process killed after storing the message leaves no marker; the next turn adds one
    (main stacked two user turns: the thread sent to the experts then broke alternation)."""
    orch = Orchestrator(potato_categories(), model=team.model(), store=any_url)
    await orch.handle("c", "hello there", user_id="u", client_message_id="m-1")
    # What a SIGKILL right after the turn's first transaction leaves: a stored question.
    await orch.store.add_user_message(
        "c", "where is order 12345?", user_id="u", client_message_id="m-2"
    )
    await orch.handle("c", "hello again", user_id="u", client_message_id="m-3")
    retried = await orch.handle(
        "c", "where is order 12345?", user_id="u", client_message_id="m-2"
    )  # The crashed turn's own retry still finishes it, beside its marker.
    transcript = await orch.transcript("c", user_id="u")
    thread = await orch.user_thread("c", user_id="u")
    await orch.aclose()
    assert [(m.role, m.failed) for m in transcript] == [
        ("user", False),
        ("assistant", False),
        ("user", False),
        ("assistant", True),
        ("user", False),
        ("assistant", False),
    ]
    roles = [m.role for m in thread.messages]
    assert roles == ["user", "assistant"] * (len(roles) // 2)
    assert not retried.replayed and retried.user_message_id == transcript[2].id


async def test_the_retry_of_the_crashed_message_itself_gets_no_marker(
    team: FakeTeam, db_url: str
) -> None:
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    await orch.handle("c", "hello there", client_message_id="m-1")
    await orch.store.add_user_message("c", "hello again", client_message_id="m-2")
    await orch.handle("c", "hello again", client_message_id="m-2")
    transcript = await orch.transcript("c")
    await orch.aclose()
    assert [(m.role, m.failed) for m in transcript] == [
        ("user", False),
        ("assistant", False),
        ("user", False),
        ("assistant", False),
    ]
