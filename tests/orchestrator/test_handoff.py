"""Hand-off to a person as a conversation mode (issue 15, part 1), on SQLite and PostgreSQL.

While a person has a conversation its user messages are stored without a model call, an
operator's replies join the thread as assistant turns authored by the operator, and after
the hand-back the bot answers with the whole thread. Every step is an audit event.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from frontdesk import Handoff, SyncOrchestrator
from frontdesk.audit.chain import check_answers, verify_chain
from frontdesk.audit.replay import handoff_turns, recorded_turns
from frontdesk.audit.transcript import Transcript, build_transcript
from frontdesk.cli import app
from frontdesk.errors import (
    ConversationHandedOff,
    ConversationNotFound,
    EmptyMessage,
    HandoffClaimed,
    IdempotencyConflict,
    NotHandedOff,
    UserError,
)
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.stream import Delta, Done
from frontdesk.threads.answered import answered_turns
from frontdesk.threads.handoff import DEFAULT_TIMEOUT_MESSAGE, DEFAULT_WAITING_MESSAGE

pytestmark = pytest.mark.anyio

runner = CliRunner()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, db_url: str) -> str:
    """A SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_pg_url"))
    return db_url


class Team:
    """Routes "person" to HUMAN and the rest to OTHER; fails the test if called while
    `closed` (a person has the conversation)."""

    def __init__(self) -> None:
        self.calls: list[ModelRequest] = []
        self.closed = False

    def __call__(self, request: ModelRequest) -> Any:
        assert not self.closed, f"a model was called while handed off: {request.expert}"
        self.calls.append(request)
        if request.expert == "triage":
            last = str(request.messages[-1]["content"])
            human = "person" in last
            return {"category": "HUMAN" if human else "OTHER", "reason": "wants a human"}
        return f"bot reply {sum(1 for c in self.calls if c.expert == 'response')}"

    def of(self, expert: str) -> list[ModelRequest]:
        return [c for c in self.calls if c.expert == expert]


def build(url: str, team: Team, **kwargs: Any) -> Orchestrator:
    # Long-term memory off: its expert runs after a reply, in the background, and these
    # tests count every model call and audit event of a hand-off.
    kwargs.setdefault("memory", False)
    return Orchestrator(potato_categories(), model=FunctionModel(team), store=url, **kwargs)


async def kinds(orch: Orchestrator, cid: str) -> list[str]:
    log = orch.audit_log
    assert log is not None
    return [e.kind for e in await log.events(cid)]


async def verified(orch: Orchestrator, cid: str) -> bool:
    """The chain verifies, counting the store's answers (the `unaudited` check)."""
    log = orch.audit_log
    assert log is not None
    answered = await answered_turns(orch.store.engine)
    assert answered is not None
    return (await log.verify(cid, answered=answered)).ok


async def test_a_turn_routed_to_a_person_opens_the_hand_off(url: str) -> None:
    team = Team()
    orch = build(url, team)
    await orch.handle("c", "hello", user_id="u")
    assert await orch.handoffs() == []
    reply = await orch.handle("c", "I want a person", user_id="u")
    assert reply.handoff and reply.category == "HUMAN" and reply.text == "bot reply 2"
    [handoff] = await orch.handoffs()
    assert isinstance(handoff, Handoff)
    assert (handoff.conversation_id, handoff.user_id, handoff.reason) == ("c", "u", "wants a human")
    assert handoff.waiting_seconds >= 0 and handoff.opened_at.tzinfo is not None
    events = await kinds(orch, "c")
    assert events[-2:] == ["reply", "hand_off"]
    # A retry of the routed turn replays it and opens nothing more.
    again = await orch.hand_off("c", "another reason")
    assert again.reason == "wants a human" and len(await orch.handoffs()) == 1
    assert (await kinds(orch, "c")).count("hand_off") == 1
    await orch.aclose()


async def test_while_handed_off_messages_are_stored_without_a_model_call(url: str) -> None:
    team = Team()
    orch = build(url, team)
    await orch.handle("c", "hello", user_id="u")
    await orch.hand_off("c", "VIP customer")
    team.closed = True
    first = await orch.handle("c", "anyone there?", user_id="u", client_message_id="m-1")
    second = await orch.handle("c", "hello??", user_id="u", client_message_id="m-2")
    for reply in (first, second):
        assert reply.handoff and not reply.replayed
        assert reply.text == DEFAULT_WAITING_MESSAGE and reply.category is None
    # Idempotent: the same client message id replays the same reply, storing nothing.
    retried = await orch.handle("c", "anyone there?", user_id="u", client_message_id="m-1")
    assert retried.replayed and retried.handoff
    assert (retried.message_id, retried.text) == (first.message_id, first.text)
    with pytest.raises(IdempotencyConflict):
        await orch.handle("c", "other text", user_id="u", client_message_id="m-1")
    with pytest.raises(ConversationNotFound):  # Ownership as for any turn.
        await orch.handle("c", "let me in", user_id="mallory")
    transcript = await orch.transcript("c", user_id="u")
    assert [(m.role, m.kind) for m in transcript] == [
        ("user", "message"),
        ("assistant", "message"),
        ("user", "message"),
        ("assistant", "handoff"),
        ("user", "message"),
        ("assistant", "handoff"),
    ]
    thread = await orch.user_thread("c", user_id="u")
    assert [m.role for m in thread.messages] == ["user", "assistant"] * 3
    assert team.of("triage") == [team.calls[0]]  # Only the first turn reached a model.
    assert await verified(orch, "c")
    await orch.aclose()


async def test_an_operator_reply_is_authored_and_the_thread_sees_an_assistant_turn(
    url: str,
) -> None:
    team = Team()
    orch = build(url, team)
    await orch.handle("c", "I want a person", user_id="u")  # Handed off by the route.
    team.closed = True
    # Right after the bot's own reply: the operator's message follows it.
    hello = await orch.operator_reply("c", "Hi, I'm Sam.", operator_id="sam")
    held = await orch.handle("c", "my order is late", user_id="u")
    # The waiting message at the end is superseded by the answer.
    answer = await orch.operator_reply("c", "Let me check.", operator_id="sam")
    more = await orch.operator_reply("c", "It ships today.", operator_id="sam")
    transcript = await orch.transcript("c", user_id="u")
    assert [(m.role, m.author, m.content) for m in transcript] == [
        ("user", "user", "I want a person"),
        ("assistant", "bot", "bot reply 1"),
        ("assistant", "operator:sam", "Hi, I'm Sam."),
        ("user", "user", "my order is late"),
        ("assistant", "operator:sam", "Let me check."),
        ("assistant", "operator:sam", "It ships today."),
    ]
    assert [m.id for m in transcript][-4:] == [hello, held.user_message_id, answer, more]
    assert transcript[2].operator_id == "sam" and transcript[1].operator_id is None
    assert held.message_id not in {m.id for m in await orch.store.messages("c")}
    thread = await orch.user_thread("c", user_id="u")
    assert [(m.role, m.content) for m in thread.messages] == [
        ("user", "I want a person"),
        ("assistant", "bot reply 1\n\nHi, I'm Sam."),
        ("user", "my order is late"),
        ("assistant", "Let me check.\n\nIt ships today."),
    ]
    # A retry of the answered message replays the operator's answer.
    [handoff] = await orch.handoffs()
    assert handoff.waiting_seconds == 0  # Answered: nobody is waiting.
    assert await verified(orch, "c")
    await orch.aclose()


async def test_after_hand_back_the_bot_answers_with_the_operator_turns_in_its_thread(
    url: str,
) -> None:
    team = Team()
    orch = build(url, team)
    await orch.handle("c", "I want a person", user_id="u")
    team.closed = True
    await orch.handle("c", "where is order 77120?", user_id="u")
    await orch.operator_reply("c", "Order 77120 left the depot.", operator_id="sam")
    await orch.hand_back("c")
    assert await orch.handoffs() == []
    team.closed = False
    reply = await orch.handle("c", "thanks, and can I buy more?", user_id="u")
    assert not reply.handoff and reply.text == "bot reply 2"
    sent = team.of("response")[-1].messages
    assert [m["role"] for m in sent] == ["user", "assistant"] * 3  # The instruction last.
    assert sent[3] == {"role": "assistant", "content": "Order 77120 left the depot."}
    assert team.of("triage")[-1].messages[:-1] == sent[:-2]
    with pytest.raises(NotHandedOff):
        await orch.hand_back("c")
    with pytest.raises(NotHandedOff):
        await orch.operator_reply("c", "too late", operator_id="sam")
    assert await kinds(orch, "c") == [
        *["turn_started", "model_attempt", "triage", "request", "outcome"],
        *["model_attempt", "reply", "hand_off"],
        *["turn_started", "handoff_held", "handoff_claimed", "operator_reply", "hand_back"],
        *["turn_started", "model_attempt", "triage", "request", "outcome"],
        *["model_attempt", "reply"],
    ]
    assert await verified(orch, "c")
    await orch.aclose()


async def test_operator_calls_name_what_is_wrong(url: str) -> None:
    orch = build(url, Team())
    for call in (
        orch.hand_off("nope", "why"),
        orch.operator_reply("nope", "hi", operator_id="sam"),
        orch.hand_back("nope"),
    ):
        with pytest.raises(ConversationNotFound):
            await call
    await orch.handle("c", "hello", user_id="u")
    with pytest.raises(NotHandedOff) as caught:
        await orch.operator_reply("c", "hi", operator_id="sam")
    assert caught.value.conversation_id == "c" and "hand_off" in str(caught.value)
    await orch.hand_off("c", "why")
    with pytest.raises(EmptyMessage):
        await orch.operator_reply("c", "   ", operator_id="sam")
    await orch.aclose()


async def test_a_timeout_hands_back_with_the_configured_message(url: str) -> None:
    # Long enough that a turn on a loaded machine (PostgreSQL, 2 cores) stays within it.
    TIMEOUT = 1.5
    team = Team()
    orch = build(url, team, handoff_timeout=TIMEOUT, handoff_timeout_message="Back to the bot.")
    await orch.handle("c", "I want a person", user_id="u")
    await orch.handle("c", "hello?", user_id="u")  # Within the timeout: kept.
    assert len(await orch.handoffs()) == 1
    await asyncio.sleep(TIMEOUT + 0.1)
    reply = await orch.handle("c", "still there?", user_id="u")  # The next message checks.
    assert not reply.handoff and reply.text == "bot reply 2"
    transcript = await orch.transcript("c", user_id="u")
    assert [(m.author, m.content) for m in transcript][-4:] == [
        ("user", "hello?"),
        ("bot", "Back to the bot."),  # In place of the waiting message.
        ("user", "still there?"),
        ("bot", "bot reply 2"),
    ]
    assert await orch.handoffs() == []
    # `handoffs()` checks too, with nobody writing.
    await orch.handle("d", "I want a person", user_id="u")
    await asyncio.sleep(TIMEOUT + 0.1)
    assert await orch.handoffs() == []
    last = (await orch.transcript("d", user_id="u"))[-1]
    assert (last.author, last.content) == ("bot", "Back to the bot.")
    for cid in ("c", "d"):
        events = await kinds(orch, cid)
        assert events.index("handoff_timeout") + 1 == events.index("hand_back")
        assert await verified(orch, cid)
    await orch.aclose()


def test_the_timeout_and_messages_are_checked_at_construction(db_url: str) -> None:
    from frontdesk.errors import ConfigError

    with pytest.raises(ConfigError, match="handoff_timeout"):
        Orchestrator(potato_categories(), model="offline", store=db_url, handoff_timeout=0)
    with pytest.raises(ConfigError, match="handoff_message"):
        Orchestrator(potato_categories(), model="offline", store=db_url, handoff_message=" ")
    orch = Orchestrator(potato_categories(), model="offline", store=db_url)
    assert orch.handoff_policy.timeout is None
    assert orch.handoff_policy.timeout_message == DEFAULT_TIMEOUT_MESSAGE


async def test_stream_edit_and_regenerate_while_handed_off(url: str) -> None:
    team = Team()
    orch = build(url, team)
    first = await orch.handle("c", "hello", user_id="u")
    await orch.hand_off("c", "checking")
    team.closed = True
    events = [e async for e in orch.stream("c", "streamed?", user_id="u")]
    assert [type(e) for e in events] == [Delta, Done]
    done = events[-1]
    assert isinstance(done, Done) and done.reply.handoff
    assert events[0] == Delta(text=DEFAULT_WAITING_MESSAGE)
    edited = await orch.edit(first.user_message_id, "hello, edited", user_id="u")
    assert edited.handoff and edited.text == DEFAULT_WAITING_MESSAGE
    with pytest.raises(ConversationHandedOff):
        await orch.regenerate(first.message_id, user_id="u")
    with pytest.raises(UserError, match="not written by the bot"):
        await orch.regenerate(edited.message_id, user_id="u")
    await orch.aclose()


async def _round_trip(url: str) -> None:
    orch = build(url, Team())
    await orch.handle("c", "I want a person", user_id="u")
    await orch.handle("c", "my parcel?", user_id="u")
    await orch.operator_reply("c", "On its way, says Sam.", operator_id="sam")
    await orch.hand_back("c")
    await orch.handle("c", "great", user_id="u")
    await orch.aclose()


def test_audit_show_html_and_thread_show_display_the_hand_off_in_order(
    url: str, tmp_path: Path
) -> None:
    asyncio.run(_round_trip(url))
    env = {"COLUMNS": "200"}
    shown = runner.invoke(app, ["audit", "show", "c", "--db", url], env=env)
    assert shown.exit_code == 0, shown.output
    out = shown.output
    assert "3 turn(s) on the active path" in out
    order = ["I want a person", "hand_off: wants a human", "my parcel?", "kept for a person"]
    order += [DEFAULT_WAITING_MESSAGE[:30], "operator:sam", "On its way, says Sam."]
    order += ["hand_back: operator", "great", "bot reply 2"]
    positions = [out.index(piece) for piece in order]
    assert positions == sorted(positions)
    html = tmp_path / "c.html"
    exported = runner.invoke(
        app, ["audit", "export", "c", "--format", "html", "-o", str(html), "--db", url]
    )
    assert exported.exit_code == 0, exported.output
    page = html.read_text()
    assert 'data-author="operator:sam"' in page and "hand_off: wants a human" in page
    assert (
        page.index("hand_off: wants a human")
        < page.index("On its way")
        < page.index("hand_back: operator")
    )
    tree = runner.invoke(app, ["thread", "show", "c", "--db", url], env=env)
    assert tree.exit_code == 0, tree.output
    lines = [tree.output.index(p) for p in ("bot reply 1", "handed off", "operator:sam")]
    assert lines == sorted(lines) and tree.output.index("handed back") > lines[-1]
    as_json = runner.invoke(app, ["thread", "show", "c", "--json", "--db", url])
    assert '"author": "operator:sam"' in as_json.output and '"closed_by": "operator"' in (
        as_json.output
    )
    verify = runner.invoke(app, ["audit", "verify", "c", "--db", url])
    assert verify.exit_code == 0 and "ok" in verify.output, verify.output


async def test_the_unaudited_check_counts_operator_answers(url: str) -> None:
    team = Team()
    orch = build(url, team)
    await orch.handle("c", "I want a person", user_id="u")
    await orch.handle("c", "one", user_id="u")
    await orch.operator_reply("c", "answer one", operator_id="sam")
    await orch.operator_reply("c", "and more", operator_id="sam")
    await orch.handle("c", "two", user_id="u")
    log = orch.audit_log
    assert log is not None
    rows = await log.events("c")
    answered = (await answered_turns(orch.store.engine) or {})["c"]
    assert answered == 4  # The bot's reply, two operator replies, one waiting message.
    verdict = verify_chain("c", rows, head=None, prompts={})
    whole = check_answers(verdict, rows, answered)
    assert whole.problem is None or whole.problem.kind != "unaudited"
    without = [r for r in rows if r.kind != "operator_reply"]
    assert check_answers(verdict, without, answered).problem is not None
    assert await verified(orch, "c")
    await orch.aclose()


async def _recorded(url: str) -> Transcript:
    orch = build(url, Team())
    await orch.handle("c", "I want a person", user_id="u")
    await orch.handle("c", "my parcel?", user_id="u")
    await orch.operator_reply("c", "On its way.", operator_id="sam")
    await orch.operator_reply("c", "Anything else?", operator_id="sam")
    await orch.hand_back("c")
    await orch.handle("c", "no thanks", user_id="u")
    log = orch.audit_log
    assert log is not None
    transcript = build_transcript("c", await log.events("c"))
    await orch.aclose()
    return transcript


def test_replay_skips_hand_off_turns_as_recorded_facts(url: str) -> None:
    transcript = asyncio.run(_recorded(url))
    replayed = recorded_turns(transcript)
    assert [t.view.user_text for t in replayed] == ["I want a person", "no thanks"]
    assert [t.author for t in handoff_turns(transcript)] == ["operator:sam", "operator:sam"]
    assert {"role": "assistant", "content": "On its way.\n\nAnything else?"} in (
        replayed[-1].messages
    )
    result = runner.invoke(
        app,
        ["audit", "replay", "c", "--model", "recorded", "--app", f"{__name__}:replay_app"]
        + ["--db", url],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    assert "2 turn(s) replayed: no category or request changed" in result.output
    assert "2 hand-off turn(s)" in result.output


def replay_app() -> Orchestrator:
    """The recorded app (for `--app`); `--model recorded` answers from the log."""
    return Orchestrator(potato_categories(), model=FunctionModel(Team()), audit=False)


def test_the_sync_orchestrator_hands_off_and_back(db_url: str) -> None:
    team = Team()
    with SyncOrchestrator(
        potato_categories(), model=FunctionModel(team), store=db_url, memory=False
    ) as orch:
        orch.handle("c", "hello", user_id="u")
        assert orch.hand_off("c", "sync").reason == "sync"
        assert [h.conversation_id for h in orch.handoffs()] == ["c"]
        team.closed = True
        assert orch.handle("c", "hi?", user_id="u").handoff
        message_id = orch.operator_reply("c", "Hello from Sam", operator_id="sam")
        assert orch.transcript("c", user_id="u")[-1].id == message_id
        orch.hand_back("c")
        team.closed = False
        assert orch.handoffs() == []
        assert not orch.handle("c", "bye", user_id="u").handoff


async def test_concurrent_user_messages_and_operator_replies_keep_the_thread_whole(
    url: str,
) -> None:
    team = Team()
    orch = build(url, team)
    await orch.handle("c", "I want a person", user_id="u")
    team.closed = True

    async def user(i: int) -> None:
        reply = await orch.handle("c", f"user {i}", user_id="u", client_message_id=f"m-{i}")
        assert reply.handoff

    async def operator(i: int) -> None:
        await orch.operator_reply("c", f"operator {i}", operator_id="sam")

    await asyncio.gather(*(f(i) for i in range(6) for f in (user, operator)))
    transcript = await orch.transcript("c", user_id="u")
    users = [m.content for m in transcript if m.role == "user"]
    operators = [m.content for m in transcript if m.operator_id == "sam"]
    assert sorted(users) == ["I want a person", *(f"user {i}" for i in range(6))]
    assert sorted(operators) == [f"operator {i}" for i in range(6)]
    for before, after in zip(transcript, transcript[1:], strict=False):
        assert not (before.role == after.role == "user")  # Every user message answered.
    assert transcript[-1].role == "assistant"
    thread = await orch.user_thread("c", user_id="u")
    roles = [m.role for m in thread.messages]
    assert roles == ["user", "assistant"] * (len(roles) // 2)
    assert await verified(orch, "c")
    await orch.aclose()


async def test_a_claimed_conversation_is_answered_by_its_claimant_and_a_claim_is_a_transfer(
    url: str,
) -> None:
    orch = build(url, Team())
    await orch.handle("c", "I want a person", user_id="u")
    [waiting] = await orch.handoffs()
    assert waiting.claimed_by is None
    first = await orch.claim("c", operator_id="sam")
    assert first.previous is None and first.handoff.claimed_by == "sam"
    assert (await orch.claim("c", operator_id="sam")).previous is None  # no change, no event
    with pytest.raises(HandoffClaimed) as refused:
        await orch.operator_reply("c", "I'm Ann", operator_id="ann")
    assert refused.value.claimed_by == "sam"
    taken = await orch.claim("c", operator_id="ann")
    assert taken.previous == "sam" and taken.handoff.claimed_by == "ann"
    with pytest.raises(HandoffClaimed):
        await orch.operator_reply("c", "Sam again", operator_id="sam")
    await orch.operator_reply("c", "Ann here, I can help.", operator_id="ann")
    await orch.hand_back("c", operator_id="ann")
    log = orch.audit_log
    assert log is not None
    desk = [
        (e.kind, e.payload.get("operator_id"), e.payload.get("previous"))
        for e in await log.events("c")
        if e.kind in {"handoff_claimed", "operator_reply", "hand_back"}
    ]
    assert desk == [
        ("handoff_claimed", "sam", None),
        ("handoff_claimed", "ann", "sam"),
        ("operator_reply", "ann", None),
        ("hand_back", "ann", None),
    ]
    transfer = [e for e in await log.events("c") if e.kind == "handoff_claimed"][1]
    assert transfer.payload["transfer"] is True
    assert await verified(orch, "c")
    await orch.aclose()


async def test_a_reply_on_an_unclaimed_hand_off_claims_it(url: str) -> None:
    orch = build(url, Team())
    await orch.handle("c", "I want a person", user_id="u")
    await orch.operator_reply("c", "Sam here.", operator_id="sam")
    [handoff] = await orch.handoffs()
    assert handoff.claimed_by == "sam"
    with pytest.raises(HandoffClaimed):
        await orch.operator_reply("c", "Ann here.", operator_id="ann")
    await orch.aclose()
