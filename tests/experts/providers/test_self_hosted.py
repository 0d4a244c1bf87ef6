"""Self-hosted OpenAI-compatible servers, through the real SDKs to the local wire server in
the modes that act like them: `llama-server` (prefill, grammar-constrained JSON) and
`llama-cpp-python` (500 on `json_schema`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from frontdesk.errors import (
    ConfigError,
    OutputValidationError,
    ProviderOverloaded,
    UnknownModelSpec,
    UnsupportedOutput,
)
from frontdesk.experts.providers import ModelRequest, ModelSettings, model_from_spec
from frontdesk.experts.providers._retry import RetryConfig, RetryRunner
from frontdesk.experts.providers.anthropic import AnthropicModel
from frontdesk.experts.providers.base import settings_of
from frontdesk.experts.providers.openai import OpenAIModel
from frontdesk.experts.request import extraction_type
from frontdesk.labels import INSTRUCTION_LABEL
from tests.experts.providers.conftest import FakeClock
from tests.experts.providers.wire_server import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    LlamaCppPython,
    LlamaServer,
    Reply,
    WireServer,
    anthropic_text,
    openai_completion,
)

pytestmark = pytest.mark.anyio

INSTRUCTION = "Tell the user the £3.99 delivery fee was refunded. Apologise for the delay."


class Order(BaseModel):
    variety: Literal["purple", "idaho"]
    bags: int = Field(ge=1)
    code: str = Field(default="0000", pattern=r"^\d{4}$")


def _response_request(settings: ModelSettings | None = None) -> ModelRequest:
    return ModelRequest(
        expert="response",
        system="You are the shop.",
        messages=[
            {"role": "user", "content": "my delivery was late"},
            {"role": "assistant", "content": INSTRUCTION},
        ],
        settings=settings or ModelSettings(),
    )


def _structured(output_type: type[BaseModel]) -> ModelRequest:
    return ModelRequest(
        expert="request",
        system="Extract the order.",
        messages=[{"role": "user", "content": "two bags of idaho please"}],
        output_type=output_type,
    )


@pytest.fixture
async def models() -> AsyncIterator[list[Any]]:
    made: list[Any] = []
    yield made
    for model in made:
        await model.aclose()


def _spec(wire: WireServer, models: list[Any], query: str = "") -> OpenAIModel:
    model = model_from_spec(f"openai:smollm2@{wire.url}/v1{query}")
    assert isinstance(model, OpenAIModel)
    models.append(model)
    return model


async def test_a_prefilling_server_never_gets_the_instruction_as_an_assistant_message(
    wire: WireServer, models: list[Any]
) -> None:
    wire.mode = LlamaServer(text="Sorry for the wait: the fee is back on your card.")
    for query in ("", "?instruction=user", "?instruction=system"):
        response = await _spec(wire, models, query).request(_response_request())
        assert INSTRUCTION not in response.output
        assert not response.output.startswith("Tell the user")
        assert response.output == "Sorry for the wait: the fee is back on your card."
    user, system = wire.mode.seen[1]["messages"], wire.mode.seen[2]["messages"]
    assert [m["role"] for m in user] == ["system", "user"]
    assert user[-1]["content"].endswith(f"{INSTRUCTION_LABEL}\n{INSTRUCTION}")
    assert [m["role"] for m in system] == ["system", "user", "system"]
    assert system[-1]["content"] == f"{INSTRUCTION_LABEL}\n{INSTRUCTION}"


async def test_instruction_assistant_is_the_only_way_to_a_prefill_and_the_server_leaks_it(
    wire: WireServer, models: list[Any]
) -> None:
    """The mode really continues a trailing assistant message: asked for, the leak shows."""
    wire.mode = LlamaServer(text="Sorry for the wait.")
    response = await _spec(wire, models, "?instruction=assistant").request(_response_request())
    assert response.output.startswith(INSTRUCTION)
    assert wire.mode.seen[0]["messages"][-1] == {"role": "assistant", "content": INSTRUCTION}


async def test_anthropic_puts_the_instruction_where_asked_and_never_last_as_assistant(
    wire: WireServer, models: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    wire.script(ANTHROPIC_PATH, Reply(body=anthropic_text("ok")), Reply(body=anthropic_text("ok")))
    for query in ("", "?instruction=system"):
        model = model_from_spec(f"anthropic:claude-test{query}")
        models.append(model)
        await model.request(_response_request())
    default, system = (r.body for r in wire.requests_to(ANTHROPIC_PATH))
    assert default["messages"][-1]["role"] == "user"
    assert default["messages"][-1]["content"][-1]["text"] == f"{INSTRUCTION_LABEL}\n{INSTRUCTION}"
    assert system["messages"][-1]["content"] == [{"type": "text", "text": "my delivery was late"}]
    assert system["system"][-1] == {"type": "text", "text": f"{INSTRUCTION_LABEL}\n{INSTRUCTION}"}


async def test_grammar_constrained_json_schema_answer_validates(
    wire: WireServer, models: list[Any]
) -> None:
    wire.mode = LlamaServer(wants={"Order": {"variety": "idaho", "bags": 2, "note": "extra"}})
    response = await _spec(wire, models).request(_structured(Order))
    assert response.output == Order(variety="idaho", bags=2)
    [body] = wire.mode.seen
    assert body["response_format"]["type"] == "json_schema"


async def test_llama_cpp_python_500_on_json_schema_is_a_config_error_naming_output(
    wire: WireServer, models: list[Any]
) -> None:
    wire.mode = LlamaCppPython(wants={"Order": {"variety": "idaho", "bags": 2}})
    with pytest.raises(UnsupportedOutput) as caught:
        await _spec(wire, models).request(_structured(Order))
    assert "output=" in str(caught.value) and "json_schema" in str(caught.value)
    assert isinstance(caught.value, ConfigError)
    assert not isinstance(caught.value, ProviderOverloaded)
    assert len(wire.mode.seen) == 1  # never retried as an outage


async def test_output_json_object_sends_the_schema_in_the_prompt(
    wire: WireServer, models: list[Any]
) -> None:
    wire.mode = LlamaCppPython(wants={"Order": {"variety": "purple", "bags": 3}})
    response = await _spec(wire, models, "?output=json_object").request(_structured(Order))
    assert response.output == Order(variety="purple", bags=3)
    [body] = wire.mode.seen
    assert body["response_format"] == {"type": "json_object"}
    schema_message = body["messages"][1]
    assert schema_message["role"] == "system"
    assert json.loads(schema_message["content"].split("\n", 1)[1])["title"] == "Order"


async def test_output_prompt_finds_the_json_a_small_model_wraps_in_prose(
    wire: WireServer, models: list[Any]
) -> None:
    said = 'Sure! Here it is:\n```json\n{"variety": "idaho", "bags": 1}\n```\nAnything else?'
    wire.mode = LlamaServer(wants={"Order": said})
    response = await _spec(wire, models, "?output=prompt").request(_structured(Order))
    assert response.output == Order(variety="idaho", bags=1)
    [body] = wire.mode.seen
    assert "response_format" not in body and "tools" not in body


async def test_patterns_are_still_checked_after_the_server_answers(
    wire: WireServer, models: list[Any]
) -> None:
    """A grammar that ignored the pattern: the re-ask, then a typed validation error."""
    bad = {"variety": "idaho", "bags": 1, "code": "12x"}
    wire.mode = LlamaServer(wants={"Order": bad})
    with pytest.raises(OutputValidationError, match="code"):
        await _spec(wire, models, "?output=json_object").request(_structured(Order))
    assert len(wire.mode.seen) == 2  # the answer and one re-ask


async def test_output_tools_forces_a_function_call_and_reads_its_arguments(
    wire: WireServer, models: list[Any]
) -> None:
    completion = openai_completion(None, finish_reason="tool_calls")
    completion["choices"][0]["message"]["tool_calls"] = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "Order", "arguments": '{"variety": "idaho", "bags": 4}'},
        }
    ]
    wire.script(OPENAI_PATH, Reply(body=completion))
    response = await _spec(wire, models, "?output=tools").request(_structured(Order))
    assert response.output == Order(variety="idaho", bags=4)
    [sent] = wire.requests_to(OPENAI_PATH)
    assert sent.body["tool_choice"] == {"type": "function", "function": {"name": "Order"}}
    parameters = sent.body["tools"][0]["function"]["parameters"]
    assert parameters["title"] == "Order"
    # A compatible server's grammar converter gets no pattern (pydantic still checks it).
    assert "pattern" not in parameters["properties"]["code"]


async def test_the_request_expert_answer_is_a_tagged_union_the_grammar_enforces(
    wire: WireServer, models: list[Any]
) -> None:
    extraction = extraction_type(Order)
    both = {
        "request": {"variety": "idaho", "bags": 2},
        "need_more_info": {"missing": ["bags"], "question": "How many?"},
    }
    wire.mode = LlamaServer(wants={extraction.__name__: both})
    response = await _spec(wire, models).request(_structured(extraction))
    assert response.output.kind == "request"
    assert response.output.request == Order(variety="idaho", bags=2)
    assert response.output.need_more_info is None
    schema = wire.mode.seen[0]["response_format"]["json_schema"]["schema"]
    kinds = [b["properties"]["kind"]["enum"] for b in schema["anyOf"]]
    assert kinds == [["request"], ["need_more_info"]]
    assert all(b["required"][0] == "kind" for b in schema["anyOf"])


def test_extraction_still_needs_exactly_one_answer_without_kind() -> None:
    extraction = extraction_type(Order)
    with pytest.raises(ValueError, match="exactly one"):
        extraction.model_validate({})
    chosen = extraction.model_validate(
        {"kind": "need_more_info", "need_more_info": {"missing": ["bags"], "question": "?"}}
    )
    assert chosen.request is None


def test_spec_settings_parse_and_reach_the_model(wire: WireServer) -> None:
    spec = (
        "openai:smollm2@http://127.0.0.1:8090/v1?output=json_schema&context_tokens=8192"
        "&instruction=system&temperature=0.2&timeout=120&concurrency=1"
    )
    model = model_from_spec(spec)
    assert settings_of(model) == ModelSettings(
        output="json_schema",
        context_tokens=8192,
        instruction="system",
        temperature=0.2,
        timeout=120.0,
        concurrency=1,
    )
    assert model.name == "openai:smollm2@http://127.0.0.1:8090/v1"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("openai:m@http://127.0.0.1:1/v1?outptu=prompt", "did you mean 'output'"),
        ("openai:m@http://127.0.0.1:1/v1?output=xml", "output=json_schema | json_object"),
        ("openai:m@http://127.0.0.1:1/v1?context_tokens=-5", "whole number"),
        ("openai:m@http://127.0.0.1:1/v1?temperature=hot", "temperature is a number"),
        ("openai:m@http://127.0.0.1:1/v1?instruction=prefill", "instruction=system | user"),
        ("anthropic:claude-test?output=json_schema", "anthropic takes output=tools | prompt"),
    ],
)
def test_a_bad_spec_setting_says_what_to_write(
    spec: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-key")
    with pytest.raises(UnknownModelSpec, match=says.replace("|", r"\|")):
        model_from_spec(spec)


async def test_spec_temperature_is_sent_and_an_expert_setting_wins(
    wire: WireServer, models: list[Any]
) -> None:
    wire.mode = LlamaServer()
    model = _spec(wire, models, "?temperature=0.1")
    await model.request(_response_request())
    await model.request(_response_request(ModelSettings(temperature=0.7)))
    assert [b["temperature"] for b in wire.mode.seen] == [0.1, 0.7]


async def test_anthropic_output_prompt_reads_json_from_text(
    wire: WireServer, models: list[Any]
) -> None:
    wire.script(ANTHROPIC_PATH, Reply(body=anthropic_text('Here: {"variety": "idaho", "bags": 5}')))
    model = AnthropicModel(
        "claude-test",
        api_key="sk-ant-test-key",
        base_url=wire.url,
        options=ModelSettings(output="prompt"),
    )
    models.append(model)
    response = await model.request(_structured(Order))
    assert response.output == Order(variety="idaho", bags=5)
    [sent] = wire.requests_to(ANTHROPIC_PATH)
    assert "tools" not in sent.body
    assert sent.body["system"][-1]["text"].startswith("Answer with one JSON object only")


def test_a_reask_grows_the_retry_budget(clock: FakeClock) -> None:
    runner = RetryRunner(
        RetryConfig(total_seconds=60), expert="request", model="m", clock=clock.now
    )
    clock.offset += 50
    assert runner.remaining_seconds == pytest.approx(10, abs=0.5)
    runner.extend(runner.elapsed)
    assert runner.remaining_seconds == pytest.approx(60, abs=0.5)
    runner.extend(1000)  # never past twice the budget in all
    assert runner.remaining_seconds == pytest.approx(70, abs=0.5)


def test_a_timeout_longer_than_the_retry_budget_raises_the_budget(clock: FakeClock) -> None:
    runner = RetryRunner(RetryConfig(total_seconds=60), expert="triage", model="m", clock=clock.now)
    runner.at_least(110)
    assert runner.attempt_timeout(110) == pytest.approx(110, abs=0.5)
    runner.at_least(30)  # never lowers it
    assert runner.remaining_seconds == pytest.approx(110, abs=0.5)
