"""A small bank: what moves money waits for the customer's yes (`Category(confirm=...)`).

    TRANSFER     send money to another account   confirm=True (the question from the fields)
    PAY_BILL     pay a saved payee's bill         confirm=callable (the bank's own wording)
    CARD_FREEZE  freeze a lost or stolen card     no confirmation (it protects, moves nothing)
    BALANCE      the balance of an account        no confirmation (nothing moves)
    FEES         the fee for closing an account   an approved reply (`Outcome(reply=...)`)

Transfers are keyed on `context.idempotency_key` in the conversation's handler state, so
even a handler run again after a crash sends nothing twice; a card is frozen once per
customer (the user's handler state). Load it with
`frontdesk chat --app frontdesk.examples.bank:build`. The developer-kit tests and the
real-model benchmark use its card freeze and balance desks (`categories(names)`).
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, Field

from frontdesk import Category, HandlerContext, Orchestrator, Outcome, Redact
from frontdesk.orchestrator.config import ModelChoice


class TransferRequest(BaseModel):
    amount: Decimal = Field(gt=0, le=Decimal("25000"), description="Pounds to send.")
    account_number: Annotated[str, Redact("mask")] = Field(
        pattern=r"^\d{8}$", description="The payee's 8-digit account number."
    )
    reference: str | None = Field(default=None, description="The payment reference, if given.")


class PayBillRequest(BaseModel):
    payee: str = Field(description="Which saved payee: energy, water or council tax.")
    amount: Decimal = Field(gt=0, le=Decimal("5000"), description="Pounds to pay.")


class FreezeCardRequest(BaseModel):
    last_four: str = Field(pattern=r"^\d{4}$", description="Last four digits of the card.")


class BalanceRequest(BaseModel):
    account: str = Field(description="Which account: current or savings.")


class FeesRequest(BaseModel):
    account: str = Field(default="current", description="Which account the fee is for.")


async def transfer(request: TransferRequest, context: HandlerContext) -> Outcome:
    """Send the money once per turn (keyed on the turn's idempotency key)."""
    key = f"transfer:{context.idempotency_key}"
    sent = await context.state.conversation.get(key)
    if sent is None:
        sent = {"amount": str(request.amount), "to": request.account_number[-4:]}
        await context.state.conversation.put(key, sent)
    return Outcome(
        instruction=f"Tell the customer £{request.amount} is on its way to the account ending"
        f" {request.account_number[-4:]}.",
        data={"transfer": sent},
    )


def pay_bill_question(request: BaseModel) -> str:
    """The bank's own wording for a bill payment's confirmation."""
    assert isinstance(request, PayBillRequest)
    return f"Pay £{request.amount} to your {request.payee} payee today? Reply Yes or No."


async def pay_bill(request: PayBillRequest, context: HandlerContext) -> Outcome:
    await context.state.conversation.put(f"bill:{context.idempotency_key}", request.payee)
    return Outcome(instruction=f"Tell the customer the {request.payee} bill is paid.")


async def freeze_card(request: FreezeCardRequest, context: HandlerContext) -> Outcome:
    """Freeze once per card and customer (per conversation for an unnamed customer): a
    second freeze says it already is."""
    key = f"frozen:{request.last_four}"
    state = context.state.user if context.user_id is not None else context.state.conversation
    if await state.get(key) is not None:
        return Outcome(
            instruction=f"Tell the user card ending {request.last_four} is already frozen.",
            data={"frozen": request.last_four, "already": True},
        )
    await state.put(key, {"turn": context.idempotency_key})
    return Outcome(
        instruction=f"Tell the user card ending {request.last_four} is frozen.",
        data={"frozen": request.last_four, "already": False},
    )


async def balance(request: BalanceRequest, context: HandlerContext) -> Outcome:
    """The balance, with what the bank remembers of the customer (for its own use)."""
    facts = [] if context.memory is None else [m.text for m in await context.memory.recall()]
    return Outcome(
        instruction=f"Tell the customer their {request.account} balance is £1,234.50.",
        data={"amount": Decimal("1234.50"), "facts": facts},
    )


FEES_WORDING = (
    "Closing a {account} account is free. If you close a fixed-term savings account early,"
    " you lose 90 days' interest. This is our standard disclosure."
)
"""Wording the compliance team approved: sent word for word, never rewritten by a model."""


async def fees(request: FeesRequest, context: HandlerContext) -> Outcome:
    return Outcome(
        instruction="State the account closure fee.",
        reply=FEES_WORDING.format(account=request.account),
    )


def categories(names: Sequence[str] | None = None) -> list[Category]:
    """The bank's categories (fresh objects each call); `names`: only those, in that order.

    Raises:
        KeyError: a name the bank has no category for.
    """
    every = {c.name: c for c in _categories()}
    return list(every.values()) if names is None else [every[n] for n in names]


def _categories() -> list[Category]:
    return [
        Category(
            name="TRANSFER",
            description="Send money to another account",
            request=TransferRequest,
            handler=transfer,
            examples=["Send £50 to 12345678", "Transfer 200 pounds to my landlord's account"],
            confirm=True,
        ),
        Category(
            name="PAY_BILL",
            description="Pay a bill to a saved payee (energy, water, council tax)",
            request=PayBillRequest,
            handler=pay_bill,
            examples=["Pay my energy bill of £84"],
            confirm=pay_bill_question,
        ),
        Category(
            name="CARD_FREEZE",
            description="Freeze a lost or stolen card",
            request=FreezeCardRequest,
            handler=freeze_card,
            examples=["I lost my card ending 4242"],
        ),
        Category(
            name="BALANCE",
            description="The balance of an account",
            request=BalanceRequest,
            handler=balance,
            examples=["What is my current account balance?"],
        ),
        Category(
            name="FEES",
            description="Fees for closing an account",
            request=FeesRequest,
            handler=fees,
            examples=["How much does it cost to close my account?"],
        ),
    ]


def build(
    *, model: ModelChoice = None, store: str = "sqlite:///bank.db", **kwargs: Any
) -> Orchestrator:
    """An Orchestrator for the bank (`--app frontdesk.examples.bank:build`)."""
    return Orchestrator(
        categories(), model=model, store=store, business_name="Sample Bank", **kwargs
    )
