"""A small bank app for the developer-kit tests: `--app tests.orchestrator._bank:build`.

Card freeze (user state, an idempotency record), a balance (a handler that reads memory),
and a complaint that hands off; `BROKEN` raises a `KeyError`, as a handler with a bug does.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from pydantic import BaseModel, Field

from frontdesk import Category, HandlerContext, Orchestrator, Outcome


class FreezeCard(BaseModel):
    last_four: str = Field(pattern=r"^\d{4}$", description="Last four digits of the card.")


class Balance(BaseModel):
    account: str = Field(description="Which account: current or savings.")


class Complaint(BaseModel):
    summary: str = Field(description="What went wrong, in the customer's words.")


class Broken(BaseModel):
    what: str = Field(description="Anything.")


async def freeze_card(request: FreezeCard, context: HandlerContext) -> Outcome:
    """Freeze once per card: a second freeze of the same card says it already is."""
    key = f"frozen:{request.last_four}"
    if await context.state.user.get(key) is not None:
        return Outcome(
            instruction=f"Tell the user card ending {request.last_four} is already frozen.",
            data={"frozen": request.last_four, "already": True},
        )
    await context.state.user.put(key, {"turn": context.idempotency_key})
    return Outcome(
        instruction=f"Tell the user card ending {request.last_four} is frozen.",
        data={"frozen": request.last_four, "already": False},
    )


async def balance(request: Balance, context: HandlerContext) -> Outcome:
    """A balance, naming the customer's remembered income band when one is known."""
    facts = [m.text for m in await context.memory.recall()]
    return Outcome(
        instruction=f"Tell the user their {request.account} balance is 1,234.50 pounds.",
        data={"amount": Decimal("1234.50"), "facts": facts},
    )


async def complaint(request: Complaint, context: HandlerContext) -> Outcome:
    """Every complaint goes to a person."""
    return Outcome(
        instruction="Tell the user a person will look into it today.",
        handoff=request.summary,
    )


async def broken(request: Broken, context: HandlerContext) -> Outcome:
    """A handler with a bug."""
    settings: dict[str, Any] = {}
    return Outcome(instruction=settings["missing"])


CATEGORIES = [
    Category(
        name="CARD_FREEZE",
        description="Freeze a lost or stolen card",
        request=FreezeCard,
        handler=freeze_card,
        examples=["I lost my card ending 4242"],
    ),
    Category(
        name="BALANCE",
        description="The balance of an account",
        request=Balance,
        handler=balance,
        examples=["What is my current account balance?"],
    ),
    Category(
        name="COMPLAINT",
        description="A complaint about the service",
        request=Complaint,
        handler=complaint,
        examples=["I want to complain about the branch"],
    ),
    Category(
        name="BROKEN",
        description="Testing a broken handler",
        request=Broken,
        handler=broken,
        examples=["break it"],
    ),
]


def build(model: Any = None, store: str = "sqlite:///bank.db") -> Orchestrator:
    """The bank's Orchestrator (the model as given: `frontdesk test` scripts it)."""
    return Orchestrator(CATEGORIES, model=model, store=store, business_name="Sample Bank")


def build_ignoring_model(model: Any = None) -> Orchestrator:
    """An app that drops the model it is given (frontdesk test must refuse it)."""
    return Orchestrator(CATEGORIES, model="offline", store="sqlite:///bank.db")
