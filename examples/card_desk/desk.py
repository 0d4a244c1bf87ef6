"""The card desk's one category, and the deployment serving it beside the potato shop."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.orchestrator import Orchestrator, Profile
from frontdesk.orchestrator.config import ModelChoice


class BlockCardRequest(BaseModel):
    """Which card to block."""

    last_four: str = Field(pattern=r"^[0-9]{4}$", description="The card's last four digits")


async def block_card(request: BlockCardRequest, context: HandlerContext) -> Outcome:
    """Block the card once: a retry of the same turn, or a second ask, finds it blocked."""
    key = f"blocked:{request.last_four}"
    where = context.state.user if context.user_id is not None else context.state.conversation
    already = await where.get(key)
    if already is None:
        await where.put(key, {"turn": context.turn_id})
    return Outcome(
        instruction=f"Tell the user the card ending {request.last_four} is blocked"
        + (" (it already was)." if already is not None else " and a new one is on its way."),
        data={"last_four": request.last_four, "blocked": True, "new": already is None},
    )


BLOCK_CARD = Category(
    name="BLOCK_CARD",
    description="Blocking a lost or stolen bank card.",
    request=BlockCardRequest,
    handler=block_card,
    examples=["I lost my card ending 4242", "Block my stolen card please"],
)


def categories() -> list[Category]:
    """The card desk's categories."""
    return [BLOCK_CARD]


def profile(*, model: ModelChoice = None, **fields: Any) -> Profile:
    """The card desk as a profile."""
    return Profile(categories(), model=model, business_name="Sample Bank", **fields)


def desks(*, model: ModelChoice = None, store: str = "sqlite:///frontdesk.db") -> Orchestrator:
    """The potato shop and the card desk on one deployment (`--app
    frontdesk.examples.card_desk:desks`): profiles `potatoes` and `cards`."""
    from frontdesk.examples.potato_shop import profile as potato_shop

    profiles = {"potatoes": potato_shop(model), "cards": profile(model=model)}
    return Orchestrator(profiles=profiles, store=store)
