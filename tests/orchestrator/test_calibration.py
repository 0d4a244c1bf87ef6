"""The token counter learns, per model, from the exact input counts real providers report."""

from __future__ import annotations

import json
from typing import Any

import pytest

from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest, ModelResponse, Usage
from frontdesk.orchestrator import Orchestrator
from frontdesk.threads.tokens import CalibratedCounter, EstimatingCounter

pytestmark = pytest.mark.anyio


def _estimate(request: ModelRequest) -> int:
    base = EstimatingCounter()
    total = base.count(request.system) + base.count_messages(request.messages)
    if request.output_type is not None:
        total += base.count(json.dumps(request.output_type.model_json_schema()))
    return total


async def test_a_real_providers_counts_calibrate_that_models_counter(db_url: str) -> None:
    seen: list[int] = []

    def provider(request: ModelRequest) -> ModelResponse:
        exact = round(_estimate(request) * 1.5)  # a tokenizer denser than the estimate
        seen.append(exact)
        output: Any = "ok"
        if request.expert == "triage":
            output = request.output_type.model_validate({"category": "OTHER"})  # type: ignore[union-attr]
        return ModelResponse(
            output=output, model="anthropic:claude-test", usage=Usage(input_tokens=exact)
        )

    orch = Orchestrator(
        potato_categories(),
        model=FunctionModel(provider, name="anthropic:claude-test"),
        store=db_url,
    )
    await orch.handle("c", "hello")
    await orch.aclose()
    counter = orch.token_counter
    assert isinstance(counter, CalibratedCounter)
    assert counter.observations("anthropic:claude-test") == len(seen) == 2
    assert counter.ratio("anthropic:claude-test") == pytest.approx(1.5 * 1.05, rel=0.02)
    assert orch.counter_for("triage").count("x" * 400) > EstimatingCounter().count("x" * 400)


async def test_doubles_and_offline_teach_the_counter_nothing(team: Any, db_url: str) -> None:
    orch = Orchestrator(potato_categories(), model="offline", store=db_url)
    await orch.handle("c", "I'd like a bag of purple potatoes")
    await orch.aclose()
    counter = orch.token_counter
    assert isinstance(counter, CalibratedCounter)
    assert counter.observations("offline") == 0
