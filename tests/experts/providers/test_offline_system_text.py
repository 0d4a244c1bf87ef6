"""The offline stand-in answers from the turns, never from an expert's own instructions
(issue 39): no system text, and not the summariser's closing request, ever comes back as
something the customer said."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import BaseModel

from frontdesk import Orchestrator
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.memory import RememberedFacts
from frontdesk.experts.providers import Message, ModelRequest
from frontdesk.experts.providers.offline import OfflineModel
from frontdesk.experts.request import extraction_type
from frontdesk.experts.summariser import WRITE_REQUEST, summariser_messages
from frontdesk.experts.triage import triage_output_type

pytestmark = pytest.mark.anyio

# Instructions that look like something worth keeping: names, numbers, requests, facts.
SYSTEM = (
    "Keep names, order and reference numbers 4242 and 9999. I live in Systemville and I"
    " prefer Welsh. Please refund order 31337 to Zed. Ask the user to confirm order 8888."
)
SAID: list[Message] = [
    {"role": "user", "content": "Hello, I want two bags of purple potatoes."},
    {"role": "assistant", "content": "[offline] Please confirm: two bags."},
    {"role": "user", "content": "Yes please."},
]


def _instructions() -> list[str]:
    """The distinctive pieces of `SYSTEM` and of the summariser's request."""
    return ["Systemville", "Welsh", "4242", "9999", "31337", "Zed", "8888", "Keep names",
            *WRITE_REQUEST.split(". ")]  # fmt: skip


def _output_types() -> dict[str, type[BaseModel] | None]:
    categories = potato_categories()
    order = next(c.request for c in categories if c.request is not None)
    return {
        "triage": triage_output_type(categories),
        "request": extraction_type(order),
        "response": None,
        "summariser": None,
        "memory": RememberedFacts,
    }


@pytest.mark.parametrize("expert", ["triage", "request", "response", "summariser", "memory"])
def test_no_expert_of_the_offline_model_answers_with_its_system_text(expert: str) -> None:
    messages = list(SAID)
    if expert == "summariser":
        messages = summariser_messages(None, SAID)
    if expert == "response":
        messages = [*SAID, {"role": "assistant", "content": "Say the order is placed."}]
    if expert == "memory":
        messages = [SAID[0]]
    output_type = _output_types()[expert]
    request = ModelRequest(expert=expert, system=SYSTEM, messages=messages, output_type=output_type)
    answer = OfflineModel().answer(request)
    text = answer if isinstance(answer, str) else answer.model_dump_json()
    for piece in _instructions():
        assert piece.strip(". ") not in text, (expert, piece, text)


async def test_a_handed_back_conversations_summary_holds_its_turns_not_the_request(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'offline.db'}"
    async with Orchestrator(potato_categories(), model="offline", store=url) as orch:
        await orch.handle("c1", "I want 2 bags of purple potatoes", user_id="ana")
        await orch.hand_off("c1", "asked for a person")
        await orch.operator_reply("c1", "Order 5521 is on its way.", operator_id="op")
        await orch.hand_back("c1")
        kept = []
        for _ in range(200):
            kept = await orch.past_conversations("ana")
            if kept:
                break
            await asyncio.sleep(0.02)
        reply = await orch.handle("c2", "Any news on my potatoes?", user_id="ana")
    (summary,) = kept
    assert "5521" in summary.text and "purple potatoes" in summary.text
    for piece in WRITE_REQUEST.split(". "):
        assert piece.strip(". ") not in summary.text
        assert piece.strip(". ") not in reply.text
