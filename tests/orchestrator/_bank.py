"""A small bank app for the developer-kit tests: `--app tests.orchestrator._bank:build`.

The example bank's card freeze (user state, an idempotency record) and balance (a handler
that reads memory) (`frontdesk.examples.bank`), a complaint that hands off, and `BROKEN`,
which raises a `KeyError`, as a handler with a bug does.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.examples import bank


class Complaint(BaseModel):
    summary: str = Field(description="What went wrong, in the customer's words.")


class Broken(BaseModel):
    what: str = Field(description="Anything.")


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
    *bank.categories(["CARD_FREEZE", "BALANCE"]),
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
