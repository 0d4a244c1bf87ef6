"""The shop `benchmarks.jobs` runs (also the `--app` of its `frontdesk worker` processes):
every expert answers at once; the memory expert learns "Lives in Mumbai" from a move."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator


class Question(BaseModel):
    """Nothing to extract."""

    topic: str = "anything"


async def _answer(request: Question, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Answer the user kindly.")


CHAT = Category(name="CHAT", description="Anything", request=Question, handler=_answer)


def _model(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "CHAT", "reason": "bench"}
    if request.expert == "request":
        return {"request": {"topic": "anything"}}
    if request.expert == "memory":
        moved = "moved to mumbai" in str(request.messages[-1]["content"]).lower()
        return {"facts": [{"text": "Lives in Mumbai", "key": "home_city"}] if moved else []}
    return "Noted, thank you."


def app(**kwargs: Any) -> Orchestrator:
    """The benchmark's shop."""
    return Orchestrator([CHAT], model=FunctionModel(_model), **kwargs)
