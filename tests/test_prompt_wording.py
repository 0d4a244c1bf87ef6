"""The default prompts and built-in replies suit any business, not only a shop."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from frontdesk import Orchestrator
from frontdesk.errors import ConfigError
from frontdesk.experts.providers.offline import reply_from_instruction
from frontdesk.orchestrator.fallbacks import small_talk
from frontdesk.prompts import builtin_names, load_builtin
from frontdesk.testing import FunctionModel, ModelRequest
from tests.orchestrator._bank import CATEGORIES

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("name", builtin_names())
def test_no_default_prompt_speaks_of_a_shop(name: str) -> None:
    assert not re.search(r"\bshop", load_builtin(name).template, re.IGNORECASE)


def test_the_catch_all_reads_naturally_for_verb_and_noun_descriptions() -> None:
    instruction = small_talk(CATEGORIES).instruction
    reply = reply_from_instruction(instruction)
    assert reply == (
        "[offline] These are the things we can help with: freeze a lost or stolen card, the"
        " balance of an account, a complaint about the service and testing a broken handler."
    )
    assert "help with freeze" not in reply


async def test_business_name_names_the_business_and_shop_name_still_works(
    tmp_path: Path,
) -> None:
    systems: list[str] = []

    def model(request: ModelRequest) -> str | dict[str, str]:
        if request.expert == "triage":
            return {"category": "OTHER", "reason": "hi"}
        systems.append(request.system)
        return "Hello!"

    choices: list[dict[str, Any]] = [{"business_name": "Sample Bank"}, {"shop_name": "Sample Bank"}]
    for kwargs in choices:
        orch = Orchestrator(
            CATEGORIES,
            model=FunctionModel(model),
            store=f"sqlite:///{tmp_path / 'b.db'}",
            memory=False,
            **kwargs,
        )
        await orch.handle("c-" + next(iter(kwargs)), "hello")
        assert orch.business_name == "Sample Bank"
        await orch.aclose()
    assert len(systems) == 2
    assert all("customer-service assistant of Sample Bank." in s for s in systems)
    with pytest.raises(ConfigError, match="business_name"):
        Orchestrator(CATEGORIES, business_name="A", shop_name="B")
