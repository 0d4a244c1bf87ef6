"""`Category(knowledge=True)`: which categories' request experts are sent passages."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from frontdesk.errors import ConfigError
from frontdesk.experts import Category, Outcome
from frontdesk.experts.category import HandlerContext


class Ask(BaseModel):
    topic: str


async def _answer(request: BaseModel, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Answer from the passages.")


def test_knowledge_is_off_unless_asked_for() -> None:
    plain = Category(name="FEES", description="Fees", request=Ask, handler=_answer)
    assert plain.knowledge is False
    assert Category(
        name="FEES", description="Fees", request=Ask, handler=_answer, knowledge=True
    ).knowledge


def test_knowledge_needs_a_request_expert_and_a_bool() -> None:
    with pytest.raises(ConfigError, match="needs a request model"):
        Category(name="FAQ", description="Questions", request=None, handler=None, knowledge=True)
    with pytest.raises(ConfigError, match="True or False"):
        Category(
            name="FEES",
            description="Fees",
            request=Ask,
            handler=_answer,
            knowledge="yes",  # type: ignore[arg-type]
        )
