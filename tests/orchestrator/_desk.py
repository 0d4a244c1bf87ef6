"""A card desk's test doubles, shared by the conversation tests: its categories, whose
handlers record every run; a team that disputes charges; a transfer asked to confirm."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import BaseModel, Field

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.errors import StoreError, TurnFailed
from frontdesk.experts.providers import ModelRequest
from tests.orchestrator.conftest import FakeTeam


class Freeze(BaseModel):
    card: str = Field(default="debit", description="Which card.")


class Balance(BaseModel):
    account: str = Field(default="current", description="Which account.")


class Dispute(BaseModel):
    reason: str = Field(description="Why the charge is wrong.")
    amount: int = Field(description="Pounds disputed.")


@dataclasses.dataclass
class Desk:
    """A card desk whose handlers record every run (request, context)."""

    ran: list[tuple[str, Any, HandlerContext]] = dataclasses.field(default_factory=list)

    def handler(self, name: str) -> Any:
        async def handle(request: Any, context: HandlerContext) -> Outcome:
            self.ran.append((name, request, context))
            return Outcome(instruction=f"Tell the customer {name} is done.")

        return handle

    def categories(self) -> list[Category]:
        return [
            Category(
                name="CARD_FREEZE",
                description="Freeze or block a card",
                request=Freeze,
                handler=self.handler("CARD_FREEZE"),
            ),
            Category(
                name="BALANCE",
                description="The balance of an account",
                request=Balance,
                handler=self.handler("BALANCE"),
            ),
            Category(
                name="DISPUTE",
                description="Dispute a charge on a bill",
                request=Dispute,
                handler=self.handler("DISPUTE"),
            ),
        ]


def last_user(r: ModelRequest) -> str:
    return [m["content"] for m in r.messages if m["role"] == "user"][-1]


def dispute_team(team: FakeTeam) -> None:
    """Triage: disputes for "charge", OTHER for a question; the request expert reads the
    amount from the latest message only, the reason from any earlier one."""
    team.route = lambda r: "OTHER" if "?" in last_user(r) else "DISPUTE"

    def extract(r: ModelRequest) -> dict[str, Any]:
        said = last_user(r)
        if "£" in said:
            amount = int(said.split("£", 1)[1].split()[0])
            return {"request": {"reason": "never made those calls", "amount": amount}}
        if "request in progress" in said and 'reason = "never made those calls"' in said:
            if "carry on" in said:  # Resumed: the known fields come back in view.
                return {
                    "need_more_info": {"missing": ["amount"], "question": "How much?"},
                    "known": {"reason": "never made those calls"},
                }
        return {
            "need_more_info": {"missing": ["amount"], "question": "How much?"},
            "known": {"reason": "never made those calls"},
        }

    team.extract = extract


class Transfer(BaseModel):
    amount: int
    account_number: str


def confirmed_transfer(ran: list[tuple[Any, HandlerContext]]) -> Category:
    """A `confirm` category sending money, whose handler records every run."""

    async def transfer(request: Transfer, context: HandlerContext) -> Outcome:
        ran.append((request, context))
        return Outcome(instruction="Say it was sent.")

    return Category(
        name="TRANSFER",
        description="Send money to another account",
        request=Transfer,
        handler=transfer,
        confirm=True,
    )


def dispute_desk(team: FakeTeam, url: str, **settings: Any) -> tuple[Desk, Orchestrator]:
    """A card desk on `url` whose team disputes charges (`dispute_team`)."""
    desk = Desk()
    dispute_team(team)
    return desk, Orchestrator(desk.categories(), model=team.model(), store=url, **settings)


def two_requests(r: ModelRequest) -> dict[str, Any]:
    """A triage answer finding two requests (`FakeTeam.triage`)."""
    return {"categories": ["CARD_FREEZE", "BALANCE"], "reason": "two requests"}


async def with_the_finish_down(orch: Orchestrator, text: str, client_message_id: str) -> None:
    """`text` handled while the end of the turn fails (the database goes away after every
    handler ran and stored its outcome): the turn fails; the store is then given back."""
    finish = orch.store.finish_turn

    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreError("the database went away")

    orch.store.finish_turn = down  # type: ignore[method-assign]
    try:
        with pytest.raises(TurnFailed):
            await orch.handle("c", text, client_message_id=client_message_id)
    finally:
        orch.store.finish_turn = finish  # type: ignore[method-assign]
