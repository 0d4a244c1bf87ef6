"""Confirmation (`Category(confirm=...)`): only the customer's yes runs a money-moving handler,
once, with the request they were asked about; and approved replies (`Outcome(reply=...)`)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from pydantic import BaseModel, Field

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.errors import ConfigError
from frontdesk.examples import bank
from frontdesk.orchestrator.confirmation import answer_of
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio


class Transfer(BaseModel):
    amount: int = Field(description="Pounds to send.")
    account_number: str = Field(description="The payee's account number.")


@dataclasses.dataclass
class Bank:
    """A TRANSFER handler that records each run (what a real one would send)."""

    sent: list[tuple[Transfer, str]] = dataclasses.field(default_factory=list)

    async def transfer(self, request: Transfer, context: HandlerContext) -> Outcome:
        self.sent.append((request, context.idempotency_key))
        return Outcome(instruction=f"Tell the user £{request.amount} was sent.")

    def category(self, confirm: Any = True) -> Category:
        return Category(
            name="TRANSFER",
            description="Send money to another account",
            request=Transfer,
            handler=self.transfer,
            confirm=confirm,
        )


def poisoned(team: FakeTeam) -> None:
    """The £5,000 on "hello": triage, fooled by a poisoned summary, routes every message
    to TRANSFER, and the request expert fills in a transfer nobody asked for."""
    team.route = lambda r: "TRANSFER"
    team.extract = lambda r: {"request": {"amount": 5000, "account_number": "99998888"}}


def kinds(rows: list[Any], kind: str) -> list[dict[str, Any]]:
    return [r.payload for r in rows if r.kind == kind]


async def test_hello_moved_5000_without_confirmation_and_moves_nothing_with_it(
    team: FakeTeam, any_url: str
) -> None:
    poisoned(team)
    before = Bank()
    orch = Orchestrator([before.category(confirm=False)], model=team.model(), store=any_url)
    await orch.handle("before", "hello")
    assert [r.amount for r, _ in before.sent] == [5000]  # The incident, as it was.

    after = Bank()
    orch = Orchestrator([after.category()], model=team.model(), store=any_url)
    asked = await orch.handle("after", "hello")
    assert asked.awaiting_confirmation and after.sent == []
    assert asked.confirmation is not None and "5000" in asked.confirmation
    assert "99998888" in asked.confirmation
    no = await orch.handle("after", "No")
    assert not no.awaiting_confirmation and after.sent == []
    assert no.category == "TRANSFER" and no.outcome is not None
    assert "nothing was done" in no.outcome.instruction
    assert orch.audit_log is not None
    rows = await orch.audit_log.events("after")
    await orch.aclose()
    statuses = [e["status"] for e in kinds(rows, "confirmation")]
    assert statuses == ["asked", "declined"]


async def test_yes_runs_the_pending_request_once_and_a_retry_runs_nothing_again(
    team: FakeTeam, any_url: str
) -> None:
    poisoned(team)
    bank = Bank()
    orch = Orchestrator([bank.category()], model=team.model(), store=any_url)
    await orch.handle("c", "send 5000 to 99998888")
    # Whatever the request expert would say now, the handler gets what was asked about.
    team.extract = lambda r: {"request": {"amount": 1, "account_number": "11112222"}}
    calls = len(team.calls)
    yes = await orch.handle("c", "Yes", client_message_id="yes-1")
    assert [(r.amount, r.account_number) for r, _ in bank.sent] == [(5000, "99998888")]
    assert {c.expert for c in team.calls[calls:]} == {"response"}  # No triage, no extraction.
    assert yes.category == "TRANSFER" and not yes.awaiting_confirmation
    assert yes.request == Transfer(amount=5000, account_number="99998888")
    again = await orch.handle("c", "Yes", client_message_id="yes-1")
    assert again.replayed and len(bank.sent) == 1
    # A second "yes" is a new message: nothing waits for it, so it goes through triage
    # and the extraction, which ask again (never a silent second transfer).
    second = await orch.handle("c", "yes")
    assert second.awaiting_confirmation and len(bank.sent) == 1
    assert orch.audit_log is not None
    rows = await orch.audit_log.events("c")
    await orch.aclose()
    statuses = [e["status"] for e in kinds(rows, "confirmation")]
    assert statuses == ["asked", "confirmed", "asked"]


async def test_an_edited_yes_does_not_run_the_handler_twice(team: FakeTeam, db_url: str) -> None:
    poisoned(team)
    bank = Bank()
    orch = Orchestrator([bank.category()], model=team.model(), store=db_url)
    await orch.handle("c", "send 5000 to 99998888")
    yes = await orch.handle("c", "yes")
    edited = await orch.edit(yes.user_message_id, "yes please")
    await orch.aclose()
    assert len(bank.sent) == 1
    assert edited.awaiting_confirmation  # Read as a new request: asked again.


async def test_a_yes_after_the_ttl_asks_again(team: FakeTeam, any_url: str) -> None:
    poisoned(team)
    bank = Bank()
    orch = Orchestrator(
        [bank.category()], model=team.model(), store=any_url, confirm_ttl=timedelta(microseconds=1)
    )
    await orch.handle("c", "send 5000 to 99998888")
    late = await orch.handle("c", "yes")
    assert late.awaiting_confirmation and bank.sent == []
    assert orch.audit_log is not None
    rows = await orch.audit_log.events("c")
    await orch.aclose()
    assert [e["status"] for e in kinds(rows, "confirmation")] == ["asked", "expired", "asked"]


async def test_a_correction_extracts_again_and_asks_again(team: FakeTeam, db_url: str) -> None:
    poisoned(team)
    bank = Bank()
    orch = Orchestrator([bank.category()], model=team.model(), store=db_url)
    await orch.handle("c", "send 5000 to 99998888")
    team.extract = lambda r: {"request": {"amount": 50, "account_number": "99998888"}}
    extractions = len(team.of("request"))
    fixed = await orch.handle("c", "sorry, make it 50")
    assert len(team.of("request")) > extractions
    assert fixed.awaiting_confirmation and fixed.confirmation is not None
    assert "50" in fixed.confirmation and "5000" not in fixed.confirmation
    await orch.handle("c", "yes")
    await orch.aclose()
    assert [r.amount for r, _ in bank.sent] == [50]


async def test_a_callable_confirm_asks_verbatim_without_the_response_expert(
    team: FakeTeam, db_url: str
) -> None:
    poisoned(team)
    bank = Bank()

    def question(request: BaseModel) -> str:
        assert isinstance(request, Transfer)
        return f"Send £{request.amount} to account ending {request.account_number[-4:]}?"

    orch = Orchestrator([bank.category(confirm=question)], model=team.model(), store=db_url)
    events = [e async for e in orch.stream("c", "hello")]
    await orch.aclose()
    (done,) = [e for e in events if e.type == "done"]
    reply = done.reply
    assert reply.text == reply.confirmation == "Send £5000 to account ending 8888?"
    assert [e.text for e in events if e.type == "delta"] == [reply.text]
    assert team.of("response") == [] and bank.sent == []


async def test_an_approved_reply_is_sent_verbatim_and_audited(team: FakeTeam, any_url: str) -> None:
    text = "The early termination fee is £12. This is a regulated disclosure."

    async def fee(request: Transfer, context: HandlerContext) -> Outcome:
        return Outcome(instruction="State the fee.", reply=text)

    team.route = lambda r: "FEES"
    team.extract = lambda r: {"request": {"amount": 1, "account_number": "1"}}
    fees = Category(name="FEES", description="Fees", request=Transfer, handler=fee)
    orch = Orchestrator([fees], model=team.model(), store=any_url)
    reply = await orch.handle("c", "what is the fee?", client_message_id="m-1")
    again = await orch.handle("c", "what is the fee?", client_message_id="m-1")
    assert orch.audit_log is not None
    rows = await orch.audit_log.events("c")
    await orch.aclose()
    assert reply.text == again.text == text and again.replayed
    assert team.of("response") == []
    assert [e["text"] for e in kinds(rows, "reply_approved")] == [text]


def test_yes_and_no_are_read_by_rule() -> None:
    assert [answer_of(t) for t in ("Yes", "yes!", " YES please ", "ok.", "Go ahead")] == ["yes"] * 5
    assert [answer_of(t) for t in ("No", "no.", "Cancel it", "don’t")] == ["no"] * 4
    for other in ("yes but make it 50", "hello", "no, 500 not 5000", ""):
        assert answer_of(other) is None


def test_confirm_needs_a_handler_and_a_question() -> None:
    with pytest.raises(ConfigError, match="confirm needs a request model and a handler"):
        Category(name="X", description="x", request=None, handler=None, confirm=True)
    with pytest.raises(ConfigError, match="confirm must be"):
        Category(name="X", description="x", request=None, handler=None, confirm="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="confirm_ttl must be positive"):
        Orchestrator([], model="offline", confirm_ttl=0)


async def test_the_bank_example_asks_before_any_money_moves(team: FakeTeam, db_url: str) -> None:
    poisoned(team)
    orch = bank.build(model=team.model(), store=db_url)
    asked = await orch.handle("c", "hello")
    state = orch.store.handler_state("TRANSFER", conversation_id="c", user_id=None)
    assert asked.awaiting_confirmation and await state.conversation.items("transfer:") == []
    assert asked.confirmation is not None and "****8888" in asked.confirmation
    assert "99998888" not in asked.confirmation  # A masked field stays masked in the question.
    await orch.handle("c", "no")
    assert await state.conversation.items("transfer:") == []
    await orch.handle("c", "hello")
    await orch.handle("c", "yes")
    sent = await state.conversation.items("transfer:")
    await orch.aclose()
    assert [v for _, v in sent] == [{"amount": "5000", "to": "8888"}]
