"""The potato shop's categories: request models and handlers ("TradCode")."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from frontdesk import Category, HandlerContext, Orchestrator, Outcome, Profile, Redact
from frontdesk.experts.category import HandlerStore
from frontdesk.orchestrator.config import ModelChoice

Variety = Literal["purple", "idaho", "maris piper"]
PRICE_PER_BAG = {"purple": 6.50, "idaho": 4.00, "maris piper": 4.50}
DELIVERY_FEE = 3.99
LATE_AFTER_MINUTES = 30

# Orders placed before the demo starts; orders placed in conversations join them in the DB.
SEED_ORDERS: dict[str, dict[str, Any]] = {
    "88213": {
        "customer": "Priya",
        "placed": "3 March",
        "variety": "maris piper",
        "bags": 2,
        "status": "delivered",
        "minutes_late": 40,
        "delivery_fee": DELIVERY_FEE,
    },
    "77120": {
        "customer": "Sam",
        "placed": "28 February",
        "variety": "purple",
        "bags": 1,
        "status": "out for delivery",
        "minutes_late": 0,
        "delivery_fee": DELIVERY_FEE,
    },
}


class OrderRequest(BaseModel):
    """Buying potatoes."""

    variety: Variety = Field(description="Which potatoes.")
    bags: int = Field(ge=1, le=50, description="How many bags (1 to 50).")
    confirmed: bool = Field(
        default=False,
        description="True only if the user explicitly confirmed this exact order after being"
        " asked to confirm it.",
    )


OrderNumber = Annotated[
    str,
    # An order number is no personal data: the audit views show it as is, even where its
    # digits would look like an account number to the detectors.
    Redact("keep"),
    Field(pattern=r"^\d{4,8}$", description="The order number, digits only."),
]


class OrderStatusRequest(BaseModel):
    """Where is an order."""

    order_number: OrderNumber


class RefundRequest(BaseModel):
    """A refund on an order."""

    order_number: OrderNumber
    reason: str | None = Field(default=None, description="Why, in the user's words, if given.")


SHOP = "potato_shop"
"""The namespace the three categories share: ORDERS places orders, the others read them."""


def _bags(count: int) -> str:
    return f"{count} bag{'s' if count != 1 else ''}"


def _orders(context: HandlerContext) -> HandlerStore:
    """Where this customer's orders are: the shop's state of this user, seen from all their
    conversations; in single-user mode (no user id), of this conversation."""
    shop = context.state.shared(SHOP)
    return shop.conversation if context.user_id is None else shop.user


async def _order(
    context: HandlerContext, number: str
) -> tuple[dict[str, Any], HandlerStore] | None:
    """An order this customer may see (one they placed, or a sample order of the demo), and
    the scope it lives in (where its refund is recorded too)."""
    mine = _orders(context)
    stored: dict[str, Any] | None = await mine.get(f"order:{number}")
    if stored is not None:
        return stored, mine
    if number in SEED_ORDERS:  # The demo's sample orders: anyone may ask about them.
        return SEED_ORDERS[number], context.state.shared(SHOP).everyone
    return None


async def place_order(request: OrderRequest, context: HandlerContext) -> Outcome:
    """Ask to confirm first; once confirmed, place the order and keep it in the database."""
    total = PRICE_PER_BAG[request.variety] * request.bags
    what = f"{_bags(request.bags)} of {request.variety} potatoes"
    here = context.state.conversation  # What is waiting or was just placed, in this chat.
    if not request.confirmed:
        pending = {"variety": request.variety, "bags": request.bags, "total": total}
        await here.put("pending", pending)
        return Outcome(
            instruction=f"Ask the user to confirm buying {what} for £{total:.2f}"
            " (they can press confirm or say yes).",
            data={"action": "confirm_order", "pending_order": pending},
        )
    # Keyed on the turn: a retry after a crash in here finds this turn's order number and
    # writes the same order again (a put replaces), so one turn places at most one order.
    keyed = f"placed:{context.idempotency_key}"
    number = await here.get(keyed)
    if number is None:
        pending = await here.get("pending")
        if not pending or (pending["variety"], pending["bags"]) != (request.variety, request.bags):
            # A "yes" with nothing waiting (the order already placed, or another question
            # asked since) must not place an order again.
            placed = await here.get("placed")
            already = f" Their order {placed} is already placed." if placed else ""
            return Outcome(
                instruction="Tell the user there is no order waiting for their confirmation."
                f"{already} Ask what they would like to buy if they want another order.",
                data={"action": "nothing_to_confirm", "order_number": placed},
            )
        number = str(int(uuid.uuid4().int % 90_000) + 10_000)
        await here.put(keyed, number)
    order = {
        "customer": context.user_id,
        "conversation_id": context.conversation_id,
        "placed": "today",
        "variety": request.variety,
        "bags": request.bags,
        "status": "being packed",
        "minutes_late": 0,
        "delivery_fee": DELIVERY_FEE,
        "total": total,
        "turn": context.idempotency_key,
    }
    await _orders(context).put(f"order:{number}", order)
    await here.delete("pending")
    await here.put("placed", number)
    return Outcome(
        instruction=f"Tell the user their order {number} for {what} (£{total:.2f}) is placed"
        " and will be delivered tomorrow.",
        data={"order_number": number, "order": order},
    )


async def order_status(request: OrderStatusRequest, context: HandlerContext) -> Outcome:
    """Look the order up."""
    found = await _order(context, request.order_number)
    if found is None:
        return Outcome(
            instruction=f"Tell the user we cannot find order {request.order_number} and ask them"
            " to check the number."
        )
    order, _ = found
    return Outcome(
        instruction=f"Tell the user that order {request.order_number} ({_bags(order['bags'])} of"
        f" {order['variety']}) is {order['status']}.",
        data={"order_number": request.order_number, "status": order["status"]},
    )


async def refund(request: RefundRequest, context: HandlerContext) -> Outcome:
    """Refund the delivery fee of a late delivery, once per order."""
    number = request.order_number
    found = await _order(context, number)
    if found is None:
        return Outcome(
            instruction=f"Tell the user we cannot find order {number} and ask them to check it."
        )
    order, where = found
    done = await where.get(f"refund:{number}")
    if done is not None and done.get("key") != context.idempotency_key:
        return Outcome(
            instruction=f"Tell the user the delivery fee of order {number} was already refunded.",
            data={"order_number": number, "refunded": False, "already": True},
        )
    if order["minutes_late"] <= LATE_AFTER_MINUTES:
        return Outcome(
            instruction=f"Tell the user order {number} was not late enough for a refund of the"
            f" delivery fee (over {LATE_AFTER_MINUTES} minutes late), and offer a person to"
            " look again.",
            data={"order_number": number, "refunded": False},
        )
    fee = float(order["delivery_fee"])
    # One refund per order; a retry of the same turn (same key) finds its own refund.
    record = {"amount": fee, "turn": context.turn_id, "key": context.idempotency_key}
    await where.put(f"refund:{number}", record)
    return Outcome(
        instruction=f"Tell the user the £{fee:.2f} delivery fee for order {number}, which arrived"
        f" {order['minutes_late']} minutes late, has been refunded to their original payment"
        " method and will show in 3-5 working days. Apologise for the delay.",
        data={"order_number": number, "refunded": True, "amount": fee},
    )


ORDERS = Category(
    name="ORDERS",
    description="Buying potatoes (purple, idaho, maris piper), or changing or confirming an"
    " order not yet placed.",
    request=OrderRequest,
    handler=place_order,
    examples=["I'd like to buy a bag of purple potatoes", "Make it three bags", "Yes, confirm"],
)
ORDER_STATUS = Category(
    name="ORDER_STATUS",
    description="Where an order is, or when it will arrive.",
    request=OrderStatusRequest,
    handler=order_status,
    examples=["Where is my order 77120?", "Has order 88213 shipped?"],
)
REFUND = Category(
    name="REFUND",
    description="Money back on an order: a late delivery, a refund of a fee.",
    request=RefundRequest,
    handler=refund,
    examples=[
        "My order arrived late and I was told the delivery fee would be refunded",
        "I want a refund for order 88213",
    ],
)


def categories() -> list[Category]:
    """The potato shop's categories."""
    return [ORDERS, ORDER_STATUS, REFUND]


def profile(model: ModelChoice = None, **fields: Any) -> Profile:
    """What the potato shop is: its categories, its name and the models its experts use."""
    return Profile(categories(), model=model, business_name="Spud & Co.", **fields)


_PROFILE_FIELDS = frozenset(f.name for f in dataclasses.fields(Profile))


def build(
    *, model: ModelChoice = None, store: str = "sqlite:///frontdesk.db", **kwargs: Any
) -> Orchestrator:
    """An Orchestrator for the potato shop (`--app frontdesk.examples.potato_shop:build`):
    its `profile` on `store`; `kwargs` are `Profile` fields or where it runs (`timeouts=`,
    `audit=`, `jobs=` and their flat keywords)."""
    fields = {k: v for k, v in kwargs.items() if k in _PROFILE_FIELDS}
    runtime = {k: v for k, v in kwargs.items() if k not in _PROFILE_FIELDS}
    return Orchestrator(profile=profile(model, **fields), store=store, **runtime)
