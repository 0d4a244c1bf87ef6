"""The README's tour, type-checked by `make lint` (mypy --strict); run by test_readme_api."""

from __future__ import annotations

from frontdesk import Orchestrator, Reply
from frontdesk.examples.one_screen import orders  # The README's category, as it is written.
from frontdesk.testing import FunctionModel, ModelRequest


def fake(request: ModelRequest) -> str | dict[str, object]:
    if request.expert == "triage":
        return {"category": "ORDERS"}
    if request.expert == "request":
        return {"request": {"variety": "purple", "bags": 1}}
    return "Please press confirm to buy one bag of purple potatoes."


async def tour(store: str) -> list[Reply]:
    orch = Orchestrator(categories=[orders], model=FunctionModel(fake), store=store)
    reply = await orch.handle(
        "conv-1", "I'd like a bag of purple potatoes", user_id="u-1", client_message_id="m-1"
    )
    edited = await orch.edit(reply.user_message_id, "two bags", user_id="u-1")
    again = await orch.regenerate(reply.message_id, user_id="u-1")
    assert len(await orch.branches("conv-1", user_id="u-1")) == 3
    await orch.switch_branch("conv-1", reply.message_id, user_id="u-1")
    thread = await orch.user_thread("conv-1", user_id="u-1")
    transcript = await orch.transcript("conv-1", user_id="u-1")
    assert thread.summary is None and transcript[-1].role == "assistant"
    await orch.aclose()
    return [reply, edited, again]
