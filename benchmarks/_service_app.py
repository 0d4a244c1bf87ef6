"""The app `benchmarks.service` serves: the potato shop with instant models (ORDERS)."""

from __future__ import annotations

from typing import Any

from frontdesk.examples.potato_shop import categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

REPLY = "Ok great, please press confirm to buy one bag of purple potatoes."


def _answer(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "ORDERS", "reason": "buying potatoes"}
    if request.expert == "request":
        return {"request": {"variety": "purple", "bags": 1}}
    if request.expert == "summariser":
        return "The user orders purple potatoes."
    if request.expert == "memory":  # after the reply, off its path
        return {"facts": []}
    return REPLY


def build(store: str, model: Any = None) -> Orchestrator:
    """The shop on `store`, always with the instant double (`model` is ignored)."""
    return Orchestrator(categories(), model=FunctionModel(_answer), store=store)
