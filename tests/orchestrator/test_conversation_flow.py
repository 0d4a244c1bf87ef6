"""Conversations as people have them (issue 44): several requests in one message, a request
in progress answered without triage, a digression and back, a cancellation, a correction,
"which do you mean?", and the customer's language."""

from __future__ import annotations

from typing import Any

import pytest

from frontdesk import Clarify, HandlerContext, Orchestrator
from tests.orchestrator._desk import (
    Desk,
    confirmed_transfer,
    dispute_desk,
    last_user,
    two_requests,
)
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio


async def test_two_requests_in_one_message_run_both_handlers_once(
    team: FakeTeam, any_url: str
) -> None:
    desk = Desk()
    team.triage, team.extract = two_requests, lambda r: {"request": {}}
    orch = Orchestrator(desk.categories(), model=team.model(), store=any_url)
    reply = await orch.handle("c", "Freeze my card and tell me my balance")
    again = await orch.handle("c", "Freeze my card and tell me my balance", client_message_id=None)
    await orch.aclose()
    assert reply.categories == ["CARD_FREEZE", "BALANCE"]
    assert reply.category == "CARD_FREEZE"
    ran = [name for name, _, _ in desk.ran]
    assert ran[:2] == ["CARD_FREEZE", "BALANCE"]
    keys = {c.idempotency_key for _, _, c in desk.ran[:2]}
    assert len(keys) == 2  # Each its own idempotency key.
    instruction = team.of("response")[0].messages[-1]["content"]
    assert "CARD_FREEZE is done" in instruction and "BALANCE is done" in instruction
    assert again.categories == ["CARD_FREEZE", "BALANCE"]


async def test_ask_mode_asks_which_first_and_the_answer_routes_without_triage(
    team: FakeTeam, db_url: str
) -> None:
    desk = Desk()
    team.triage, team.extract = two_requests, lambda r: {"request": {}}
    orch = Orchestrator(desk.categories(), model=team.model(), store=db_url, multi_intent="ask")
    asked = await orch.handle("c", "Freeze my card and tell me my balance")
    assert desk.ran == [] and asked.clarify == ["CARD_FREEZE", "BALANCE"]
    triaged = len(team.of("triage"))
    chosen = await orch.handle("c", "the balance first")
    await orch.aclose()
    assert len(team.of("triage")) == triaged
    assert [n for n, _, _ in desk.ran] == ["BALANCE", "CARD_FREEZE"]
    assert chosen.categories == ["BALANCE", "CARD_FREEZE"]


async def test_an_answer_to_the_missing_field_makes_no_triage_call(
    team: FakeTeam, any_url: str
) -> None:
    desk, orch = dispute_desk(team, any_url)
    first = await orch.handle("c", "I want to dispute a charge: I never made those calls")
    assert first.pending == "DISPUTE" and desk.ran == []
    triaged = len(team.of("triage"))
    reply = await orch.handle("c", "£12")
    await orch.aclose()
    assert len(team.of("triage")) == triaged
    assert reply.category == "DISPUTE" and reply.pending is None
    [(name, request, _)] = desk.ran
    assert name == "DISPUTE" and request.amount == 12
    sent = team.of("request")[-1]
    assert "request in progress" in last_user(sent)  # Labelled context, not a turn.
    thread = await orch_thread(any_url)
    assert all("request in progress" not in m for m in thread)


async def orch_thread(url: str) -> list[str]:
    orch = Orchestrator(Desk().categories(), store=url, model="offline")
    thread = await orch.user_thread("c")
    await orch.aclose()
    roles = [m.role for m in thread.messages]
    assert roles == ["user", "assistant"] * (len(roles) // 2)  # Still alternates.
    return [m.content for m in thread.messages]


async def test_a_digression_then_carry_on_runs_with_the_fields_from_before(
    team: FakeTeam, any_url: str
) -> None:
    desk, orch = dispute_desk(team, any_url)
    await orch.handle("c", "I want to dispute a charge: I never made those calls")
    aside = await orch.handle("c", "wait, what's your returns policy?")
    assert aside.category == "OTHER" and aside.pending == "DISPUTE"
    offer = team.of("response")[-1].messages[-1]["content"]
    assert "carry on with their earlier request" in offer
    team.extract = lambda r: {
        "need_more_info": {"missing": ["amount"], "question": "How much?"},
        "known": {"amount": 30},
    }
    resumed = await orch.handle("c", "yes, carry on")
    await orch.aclose()
    assert resumed.category == "DISPUTE"
    [(name, request, context)] = desk.ran
    assert request.reason == "never made those calls" and request.amount == 30


async def test_cancel_clears_the_request_in_progress(team: FakeTeam, any_url: str) -> None:
    desk, orch = dispute_desk(team, any_url)
    await orch.handle("c", "I want to dispute a charge: I never made those calls")
    calls = len(team.calls)
    cancelled = await orch.handle("c", "cancel")
    assert cancelled.cancelled is True and cancelled.pending is None and desk.ran == []
    assert [c.expert for c in team.calls[calls:]] == ["response"]
    triaged = len(team.of("triage"))
    await orch.handle("c", "£12")
    await orch.aclose()
    assert len(team.of("triage")) == triaged + 1  # Triaged afresh.


async def test_a_correction_is_told_to_the_handler(team: FakeTeam, db_url: str) -> None:
    desk, orch = dispute_desk(team, db_url)
    await orch.handle("c", "I want to dispute a charge: I never made those calls")
    team.extract = lambda r: {
        "need_more_info": {"missing": ["amount"], "question": "How much?"},
        "known": {"reason": "double billed"},
    }
    kept = await orch.handle("c", "no, it was double billed")
    assert kept.pending == "DISPUTE"
    team.extract = lambda r: {"request": {"reason": "double billed", "amount": 12}}
    await orch.handle("c", "£12")
    await orch.aclose()
    [(_, request, context)] = desk.ran
    assert request.reason == "double billed"


async def test_a_request_in_progress_expires(team: FakeTeam, db_url: str) -> None:
    desk, orch = dispute_desk(team, db_url, pending_ttl=0.001)
    await orch.handle("c", "I want to dispute a charge: I never made those calls")
    triaged = len(team.of("triage"))
    await orch.handle("c", "£12")
    await orch.aclose()
    assert len(team.of("triage")) == triaged + 1


async def test_clarify_asks_and_the_answer_routes_without_triage(
    team: FakeTeam, db_url: str
) -> None:
    desk = Desk()
    team.triage = lambda r: Clarify(["CARD_FREEZE", "BALANCE"])
    team.extract = lambda r: {"request": {}}
    orch = Orchestrator(desk.categories(), model=team.model(), store=db_url)
    asked = await orch.handle("c", "my card")
    assert asked.clarify == ["CARD_FREEZE", "BALANCE"] and desk.ran == []
    instruction = team.of("response")[-1].messages[-1]["content"]
    assert "Freeze or block a card" in instruction  # Customer words, not names.
    triaged = len(team.of("triage"))
    reply = await orch.handle("c", "freeze it")
    await orch.aclose()
    assert len(team.of("triage")) == triaged and reply.category == "CARD_FREEZE"


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("I would like to know the balance of my current account please", "en"),
        ("Hoffwn i wybod balans fy nghyfrif cyfredol os gwelwch yn dda", "cy"),
        ("Quisiera saber el saldo de mi cuenta corriente, por favor", "es"),
        ("मैं अपने चालू खाते की शेष राशि जानना चाहता हूँ", "hi"),
    ],
)
async def test_the_language_of_each_message(
    team: FakeTeam, db_url: str, text: str, language: str
) -> None:
    team.route = lambda r: "OTHER"
    orch = Orchestrator(Desk().categories(), model=team.model(), store=db_url)
    reply = await orch.handle("c", text)
    await orch.aclose()
    assert reply.language == language
    instruction = team.of("response")[-1].messages[-1]["content"]
    assert ("Write the reply in" in instruction) == (language != "en")


async def test_a_language_not_listed_is_answered_in_the_first_listed(
    team: FakeTeam, db_url: str
) -> None:
    orch = Orchestrator(
        Desk().categories(), model=team.model(), store=db_url, languages=["en", "cy"]
    )
    welsh = await orch.handle("c", "Hoffwn i wybod balans fy nghyfrif cyfredol os gwelwch yn dda")
    spanish = await orch.handle("c", "Quisiera saber el saldo de mi cuenta corriente, por favor")
    await orch.aclose()
    assert welsh.language == "cy" and spanish.language == "es"
    instructions = [c.messages[-1]["content"] for c in team.of("response")]
    assert "Welsh (cy)" in instructions[0] and "Welsh (cy)" not in instructions[1]


async def test_audit_replay_reproduces_the_routes_made_without_triage(
    team: FakeTeam, db_url: str
) -> None:
    from frontdesk.audit.replay import ReplayReport, replay_transcript
    from frontdesk.audit.transcript import build_transcript
    from frontdesk.devkit.replay import build_runner

    desk, orch = dispute_desk(team, db_url)
    await orch.handle("c", "I want to dispute a charge: I never made those calls")
    await orch.handle("c", "wait, what's your returns policy?")
    await orch.handle("c", "Hoffwn i wybod balans fy nghyfrif cyfredol os gwelwch yn dda")
    await orch.handle("c", "cancel")
    try:
        assert orch.audit_log is not None
        transcript = build_transcript("c", await orch.audit_log.events("c"))
        flows = [t.flow or {} for t in transcript.turns]
        assert [f.get("how") for f in flows] == ["triage", "triage", "triage", "cancel"]
        assert [f.get("language") for f in flows][2:] == ["cy", "cy"]
        assert [f.get("pending") for f in flows] == ["DISPUTE", "DISPUTE", "DISPUTE", None]
        calls = len(team.calls)
        report = ReplayReport(
            await replay_transcript(transcript, build_runner(orch, models="recorded"))
        )
        assert len(team.calls) == calls  # No model call: every decision from the record.
        for diff in report.diffs:
            assert diff.error is None, diff.error
            assert not diff.gating, diff
        assert report.diffs[-1].after is not None
        assert report.diffs[-1].after.category == "DISPUTE"  # The cancel, without triage.
    finally:
        await orch.aclose()


async def test_a_correction_during_a_confirmation_goes_through_the_same_path(
    team: FakeTeam, db_url: str
) -> None:
    ran: list[tuple[Any, HandlerContext]] = []
    category = confirmed_transfer(ran)
    team.route = lambda r: "TRANSFER"
    team.extract = lambda r: {"request": {"amount": 5000, "account_number": "99998888"}}
    orch = Orchestrator([category], model=team.model(), store=db_url)
    await orch.handle("c", "send 5000 to 99998888")
    team.extract = lambda r: {"request": {"amount": 50, "account_number": "99998888"}}
    triaged = len(team.of("triage"))
    fixed = await orch.handle("c", "sorry, make it 50")
    assert len(team.of("triage")) == triaged  # The held request, re-extracted: no triage.
    assert "request in progress" in last_user(team.of("request")[-1])
    assert fixed.awaiting_confirmation
    await orch.handle("c", "yes")
    declined_orch = await orch.handle("c", "send 70 to 99998888")
    no = await orch.handle("c", "no")
    await orch.aclose()
    [(request, context)] = ran
    assert request.amount == 50 and context.corrected == frozenset({"amount"})
    assert declined_orch.awaiting_confirmation and no.cancelled is True


async def test_service_answers_carry_the_new_fields() -> None:
    from frontdesk.orchestrator.reply import Reply
    from frontdesk.service._sse import reply_json

    reply = Reply(
        text="t",
        category="CARD_FREEZE",
        request=None,
        message_id="m",
        user_message_id="u",
        conversation_id="c",
        categories=["CARD_FREEZE", "BALANCE"],
        pending="DISPUTE",
        language="cy",
    )
    body = reply_json(reply)
    assert body["categories"] == ["CARD_FREEZE", "BALANCE"]
    assert body["pending"] == "DISPUTE" and body["language"] == "cy"
    assert body["clarify"] == [] and body["cancelled"] is False


@pytest.mark.parametrize(
    ("setting", "fix"),
    [
        ({"multi_intent": "parallel"}, "'sequential' or 'ask'"),
        ({"languages": "cy"}, "non-empty list of BCP 47 tags"),
        ({"languages": ["Welsh!"]}, "not a BCP 47 language tag"),
        ({"pending_ttl": 0}, "pending_ttl must be positive"),
    ],
)
def test_bad_settings_say_what_to_fix(setting: dict[str, Any], fix: str) -> None:
    from frontdesk.errors import ConfigError

    with pytest.raises(ConfigError, match=fix):
        Orchestrator(Desk().categories(), model="offline", **setting)


def test_cancel_and_resume_are_read_by_rule() -> None:
    from frontdesk.orchestrator.pending import said

    assert said("Cancel!") == "cancel" and said("never mind") == "cancel"
    assert said("Forget it.") == "cancel" and said("olvídalo") == "cancel"
    assert said("Yes, carry on") == "resume" and said("£12") is None
    assert said("cancel my card") is None  # A request, not a cancellation.
