"""The library in one screen (the README's): runs offline as it is.

python -m frontdesk.examples.one_screen
"""

import asyncio
from typing import Literal

from pydantic import BaseModel, Field

from frontdesk import Category, HandlerContext, Orchestrator, Outcome


class OrderRequest(BaseModel):
    variety: Literal["purple", "idaho", "maris piper"]
    bags: int = Field(ge=1, le=50)


async def place_order(request: OrderRequest, context: HandlerContext) -> Outcome:
    return Outcome(instruction=f"Ask the user to confirm {request.bags} bags of {request.variety}")


orders = Category(
    name="ORDERS",
    description="Buying potatoes",
    request=OrderRequest,
    handler=place_order,
    examples=["I'd like a bag of purple potatoes"],
)


async def main() -> None:
    # A real model: model="anthropic:claude-sonnet-4-5" with ANTHROPIC_API_KEY set.
    orch = Orchestrator(categories=[orders], model="offline", store="sqlite:///example.db")
    reply = await orch.handle(
        "conv-1", "I'd like a bag of purple potatoes", user_id="u-1", client_message_id="m-1"
    )  # idempotent per client_message_id: a retry never runs the handler twice
    print(reply.text, reply.category, reply.request, sep="\n")
    edited = await orch.edit(reply.user_message_id, "two bags", user_id="u-1")  # a new branch
    await orch.regenerate(edited.message_id, user_id="u-1")  # another answer beside it
    print(len(await orch.branches("conv-1", user_id="u-1")), "branches")
    await orch.switch_branch("conv-1", reply.message_id, user_id="u-1")  # the first again
    thread = await orch.user_thread("conv-1", user_id="u-1")  # what the experts are sent next
    transcript = await orch.transcript("conv-1", user_id="u-1")  # the active path, in full
    print(len(thread.messages), "thread messages;", [m.content for m in transcript])
    await orch.aclose()


if __name__ == "__main__":
    asyncio.run(main())
