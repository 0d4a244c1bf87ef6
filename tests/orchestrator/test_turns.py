"""Which turn runs: idempotent retries, crash recovery, outages, edits, other processes."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
from typing import Any

import pytest

from frontdesk.errors import (
    ConversationBusy,
    ConversationNotFound,
    IdempotencyConflict,
    OutputValidationError,
    ProviderOverloaded,
    Refusal,
    TruncatedOutput,
)
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator, TurnFailed

pytestmark = pytest.mark.anyio


def ordering(team: Any) -> None:
    team.route = lambda r: "ORDERS"
    team.extract = lambda r: {"request": {"variety": "purple", "bags": 1}}


async def test_same_client_id_twice_is_one_turn_and_no_second_model_call(
    team: Any, db_url: str
) -> None:
    ordering(team)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    first = await orch.handle("c", "a bag of purple please", client_message_id="m-1")
    calls = len(team.calls)
    again = await orch.handle("c", "a bag of purple please", client_message_id="m-1")
    transcript = await orch.transcript("c")
    await orch.aclose()
    assert calls == 3
    assert len(team.calls) == 3
    assert again.replayed and not first.replayed
    assert (again.text, again.message_id, again.category) == (
        first.text,
        first.message_id,
        "ORDERS",
    )
    assert again.request == first.request
    assert [m.role for m in transcript] == ["user", "assistant"]


async def test_same_client_id_concurrently_is_one_turn(team: Any, db_url: str) -> None:
    ordering(team)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    replies = await asyncio.gather(
        *(orch.handle("c", "a bag please", client_message_id="m-1") for _ in range(5))
    )
    transcript = await orch.transcript("c")
    await orch.aclose()
    assert len({r.message_id for r in replies}) == 1
    assert sum(not r.replayed for r in replies) == 1
    assert len(team.calls) == 3
    assert [m.role for m in transcript] == ["user", "assistant"]


async def test_same_client_id_with_other_text_is_a_conflict_that_writes_nothing(
    team: Any, db_url: str
) -> None:
    ordering(team)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    await orch.handle("c", "a bag please", client_message_id="m-1")
    calls = len(team.calls)
    with pytest.raises(IdempotencyConflict):
        await orch.handle("c", "ten bags please", client_message_id="m-1")
    transcript = await orch.transcript("c")
    await orch.aclose()
    assert len(team.calls) == calls
    assert [m.content for m in transcript] == ["a bag please", transcript[1].content]


async def test_an_outage_keeps_the_message_and_a_retry_finishes_the_turn(
    team: Any, db_url: str
) -> None:
    # Small talk: no handler acted, so the response expert's outage fails the turn (after a
    # handler acted it falls back to a plain reply: test_unreadable.py).
    team.route = lambda r: "OTHER"
    down = True

    def flaky(request: ModelRequest) -> Any:
        if down and request.expert == "response":
            raise ProviderOverloaded("overloaded", status_code=529, model="fake", attempts=4)
        return team(request)

    orch = Orchestrator(potato_categories(), model=FunctionModel(flaky), store=db_url)
    with pytest.raises(TurnFailed) as failed:
        await orch.handle("c", "a bag of purple", client_message_id="m-1")
    assert failed.value.stage == "response"
    assert failed.value.safe_reply
    stored = await orch.transcript("c")
    assert [(m.role, m.content, m.kind) for m in stored] == [
        ("user", "a bag of purple", "message"),
        ("assistant", failed.value.safe_reply, "failed"),  # The marker: the thread alternates.
    ]
    assert failed.value.user_message_id == stored[0].id

    down = False
    reply = await orch.handle("c", "a bag of purple", client_message_id="m-1")
    transcript = await orch.transcript("c")
    log = orch.audit_log
    assert log is not None
    kinds = [e.kind for e in await log.events("c")]
    await orch.aclose()
    assert not reply.replayed
    assert reply.user_message_id == stored[0].id
    assert [(m.role, m.kind) for m in transcript] == [("user", "message"), ("assistant", "message")]
    assert transcript[1].content == reply.text  # The retry's reply took the marker's place.
    assert kinds.count("turn_failed") == 1 and kinds.count("reply") == 1


async def test_edit_makes_a_sibling_branch_and_regenerate_a_sibling_answer(
    team: Any, db_url: str
) -> None:
    ordering(team)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    first = await orch.handle("c", "one bag of purple")
    second = await orch.handle("c", "make it two")
    edited = await orch.edit(second.user_message_id, "make it five")
    path = await orch.transcript("c")
    assert [m.content for m in path][:3] == ["one bag of purple", first.text, "make it five"]
    assert path[2].parent_id == first.message_id
    regenerated = await orch.regenerate(edited.message_id)
    path = await orch.transcript("c")
    siblings = await orch.store.replies_to(edited.user_message_id)
    await orch.aclose()
    assert path[-1].id == regenerated.message_id
    assert {m.id for m in siblings} == {edited.message_id, regenerated.message_id}
    last_request = team.of("request")[-1]
    assert [m["content"] for m in last_request.messages] == [
        "one bag of purple",
        first.text,
        "make it five",
    ]


def _carry_on(db_url: str, conversation: str, text: str) -> list[tuple[str, str]]:
    """Run in a separate process: a new Orchestrator over the same database."""

    def fake(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "OTHER"}
        return f"seen {len(request.messages) - 1} earlier turns"

    async def run() -> list[tuple[str, str]]:
        orch = Orchestrator(potato_categories(), model=FunctionModel(fake), store=db_url)
        await orch.handle(conversation, text)
        thread = await orch.user_thread(conversation)
        await orch.aclose()
        return [(m.role, m.content) for m in thread.messages]

    return asyncio.run(run())


@pytest.mark.processes
async def test_another_process_carries_the_conversation_on(team: Any, db_url: str) -> None:
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    reply = await orch.handle("c", "hello")
    await orch.aclose()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        thread = await asyncio.to_thread(pool.apply, _carry_on, (db_url, "c", "still there?"))
    assert thread == [
        ("user", "hello"),
        ("assistant", reply.text),
        ("user", "still there?"),
        ("assistant", "seen 3 earlier turns"),
    ]


def _hang_in_response(db_url: str, conversation: str) -> None:
    """Run in a separate process: store the user message, then hang in the response expert."""

    async def fake(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "OTHER"}
        await asyncio.sleep(3600)
        return "never"

    async def run() -> None:
        orch = Orchestrator(
            potato_categories(), model=FunctionModel(fake), store=db_url, lock_ttl=1.0
        )
        await orch.handle(conversation, "hello?", client_message_id="m-1")

    asyncio.run(run())


@pytest.mark.processes
async def test_a_crash_mid_turn_leaves_the_message_once_and_a_retry_answers_once(
    team: Any, db_url: str
) -> None:
    ctx = multiprocessing.get_context("spawn")
    worker = ctx.Process(target=_hang_in_response, args=(db_url, "c"))
    worker.start()
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url, lock_ttl=1.0)
    try:
        for _ in range(300):
            await asyncio.sleep(0.05)
            with contextlib.suppress(ConversationNotFound):  # Until the worker starts it.
                if worker.exitcode is None and await orch.transcript("c"):
                    break
        assert [m.content for m in await orch.transcript("c")] == ["hello?"]
    finally:
        worker.kill()
        worker.join()
    reply = await orch.handle("c", "hello?", client_message_id="m-1")
    transcript = await orch.transcript("c")
    await orch.aclose()
    assert [(m.role, m.content) for m in transcript] == [
        ("user", "hello?"),
        ("assistant", reply.text),
    ]
    assert len(team.of("response")) == 1


async def test_a_fallback_list_answers_from_the_next_model_in_an_outage(
    team: Any, db_url: str
) -> None:
    ordering(team)

    def down(request: ModelRequest) -> Any:
        raise ProviderOverloaded("overloaded", status_code=529, model="primary", attempts=4)

    orch = Orchestrator(
        potato_categories(),
        model={"default": [FunctionModel(down, name="primary"), "offline"]},
        store=db_url,
    )
    reply = await orch.handle("c", "I'd like to buy a bag of purple potatoes")
    await orch.aclose()
    assert reply.category == "ORDERS"
    assert reply.models == {"triage": "offline", "request": "offline", "response": "offline"}
    assert reply.text.startswith("[offline]")


@pytest.mark.parametrize("error", [TruncatedOutput, Refusal, OutputValidationError])
async def test_an_unusable_triage_answer_takes_the_safe_route(
    team: Any, db_url: str, error: type[Exception]
) -> None:
    def broken_triage(request: ModelRequest) -> Any:
        if request.expert == "triage":
            raise error("cut off, refused or invalid")
        return team(request)

    orch = Orchestrator(
        potato_categories(),
        model=FunctionModel(broken_triage),
        store=db_url,
        on_unreadable="handoff",  # The default asks again: test_unreadable.py.
    )
    reply = await orch.handle("c", "refund order 88213 now")
    log = orch.audit_log
    assert log is not None
    triage = [e.payload for e in await log.events("c") if e.kind == "triage"]
    await orch.aclose()
    assert reply.category == "HUMAN" and reply.handoff
    assert team.of("request") == []
    assert triage[0]["reason"].startswith(f"triage answer unusable ({error.__name__})")


async def test_a_refused_reply_fails_the_turn_with_a_safe_reply_and_keeps_the_message(
    team: Any, db_url: str
) -> None:
    def refusing(request: ModelRequest) -> Any:
        if request.expert == "response":
            raise Refusal("no")
        return team(request)

    orch = Orchestrator(potato_categories(), model=FunctionModel(refusing), store=db_url)
    with pytest.raises(TurnFailed) as failed:
        await orch.handle("c", "hello")
    transcript = await orch.transcript("c")
    await orch.aclose()
    assert failed.value.stage == "response" and "try again" in failed.value.safe_reply
    assert [(m.role, m.content, m.failed) for m in transcript] == [
        ("user", "hello", False),
        ("assistant", failed.value.safe_reply, True),
    ]


async def test_branches_are_listed_and_any_can_become_the_active_path(
    team: Any, db_url: str
) -> None:
    ordering(team)
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    first = await orch.handle("c", "one bag of purple")
    edited = await orch.edit(first.user_message_id, "two bags of idaho")
    leaves = await orch.branches("c")
    assert {m.id for m in leaves} == {first.message_id, edited.message_id}
    path = await orch.switch_branch("c", first.message_id)
    assert [m.content for m in path] == ["one bag of purple", first.text]
    assert [m.content for m in (await orch.user_thread("c")).messages] == [
        "one bag of purple",
        first.text,
    ]
    with pytest.raises(ConversationNotFound):
        await orch.switch_branch("other", first.message_id)
    await orch.aclose()


async def test_a_hanging_provider_fails_the_turn_at_its_deadline_and_keeps_the_message(
    team: Any, db_url: str
) -> None:
    async def hanging(request: ModelRequest) -> Any:
        if request.expert == "response":
            await asyncio.sleep(3600)
        return team(request)

    orch = Orchestrator(
        potato_categories(), model=FunctionModel(hanging), store=db_url, turn_deadline=0.3
    )
    started = asyncio.get_running_loop().time()
    with pytest.raises(TurnFailed) as failed:
        await orch.handle("c", "hello", client_message_id="m-1")
    elapsed = asyncio.get_running_loop().time() - started
    transcript = await orch.transcript("c")
    log = orch.audit_log
    assert log is not None
    kinds = [e.kind for e in await log.events("c")]
    await orch.aclose()
    assert failed.value.stage == "deadline"
    assert elapsed < 3
    assert [(m.role, m.content, m.failed) for m in transcript] == [
        ("user", "hello", False),
        ("assistant", failed.value.safe_reply, True),
    ]
    assert kinds[-1] == "turn_failed"


def test_a_turn_deadline_must_be_positive(team: Any) -> None:
    from frontdesk.errors import ConfigError

    with pytest.raises(ConfigError, match="turn_deadline"):
        Orchestrator(potato_categories(), model=team.model(), turn_deadline=0)


async def test_switching_to_an_inner_message_resolves_to_its_newest_leaf(
    team: Any, db_url: str
) -> None:
    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    first = await orch.handle("c", "hello", user_id="u")
    second = await orch.handle("c", "and potatoes?", user_id="u")
    edited = await orch.edit(second.user_message_id, "and carrots?", user_id="u")
    # The first reply has two branches below it; the edit is the newer one.
    path = await orch.switch_branch("c", first.message_id, user_id="u")
    assert [m.id for m in path][-1] == edited.message_id
    path = await orch.switch_branch("c", second.user_message_id, user_id="u")
    assert [m.id for m in path][-1] == second.message_id
    await orch.handle("c", "thanks", user_id="u")
    sent = [m["content"] for m in team.of("triage")[-1].messages]
    await orch.aclose()
    # No reply dropped off the thread: the next turn follows the whole exchange.
    assert sent == ["hello", first.text, "and potatoes?", second.text, "thanks"]


async def test_the_wait_for_a_busy_conversation_counts_against_the_turn_deadline(
    team: Any, db_url: str
) -> None:
    orch = Orchestrator(
        potato_categories(), model=team.model(), store=db_url, lock_timeout=30, turn_deadline=0.5
    )
    await orch.handle("c", "hello")
    async with orch.store.conversation_lock("c"):  # Another turn holds it.
        started = asyncio.get_running_loop().time()
        with pytest.raises(ConversationBusy):
            await orch.handle("c", "still there?")
        waited = asyncio.get_running_loop().time() - started
    await orch.aclose()
    assert 0.5 <= waited < 2, f"waited {waited:.1f} s, not the 0.5 s deadline"


async def test_a_turn_that_waited_for_its_lease_has_only_the_rest_of_its_deadline(
    db_url: str,
) -> None:
    async def slow(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "OTHER", "reason": "chat"}
        await asyncio.sleep(0.5)
        return "late"

    orch = Orchestrator(
        potato_categories(), model=FunctionModel(slow), store=db_url, turn_deadline=0.8
    )
    await orch.open()
    lock = orch.store.conversation_lock("c")
    await lock.__aenter__()

    async def let_go() -> None:
        await asyncio.sleep(0.5)
        await lock.__aexit__(None, None, None)

    releasing = asyncio.create_task(let_go())
    with pytest.raises(TurnFailed) as caught:  # 0.5 s waited + 0.5 s answering > 0.8 s.
        await orch.handle("c", "hello")
    await releasing
    await orch.aclose()
    assert caught.value.stage == "deadline"
