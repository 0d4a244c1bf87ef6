"""FunctionModel and ScriptedModel: the library's own test doubles."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from frontdesk.errors import (
    OutputValidationError,
    ProviderOverloaded,
    UnconsumedSteps,
    UnexpectedModelCall,
)
from frontdesk.experts.providers import (
    AttemptEvent,
    FunctionModel,
    ModelRequest,
    ModelResponse,
    ScriptedModel,
    Usage,
    observe_attempts,
)

pytestmark = pytest.mark.anyio


class Answer(BaseModel):
    value: int


def req(output_type: type[BaseModel] | None = None, expert: str = "request") -> ModelRequest:
    return ModelRequest(
        expert=expert,
        system="sys",
        messages=[{"role": "user", "content": "hi"}],
        output_type=output_type,
        metadata={"conversation_id": "c1"},
    )


@pytest.mark.parametrize(
    "reply", [{"value": 3}, '{"value": 3}', Answer(value=3), '```json\n{"value": 3}\n```']
)
async def test_function_model_validates_replies_into_the_output_type(reply: object) -> None:
    seen: list[ModelRequest] = []

    def fn(request: ModelRequest) -> object:
        seen.append(request)
        return reply

    request = req(Answer)
    response = await FunctionModel(fn).request(request)  # type: ignore[arg-type]
    assert response.output == Answer(value=3)
    assert response.model == "function"
    assert seen == [request] and seen[0] is request


async def test_function_model_async_text_and_model_response() -> None:
    async def fn(request: ModelRequest) -> ModelResponse:
        return ModelResponse(
            output=f"echo {request.messages[-1]['content']}", usage=Usage(input_tokens=5)
        )

    model = FunctionModel(fn, name="echo")
    response = await model.request(req())
    assert response.output == "echo hi" and response.model == "echo"
    assert response.usage.input_tokens == 5
    assert model.name == "echo" and len(model.calls) == 1


async def test_function_model_reports_one_attempt_and_errors() -> None:
    events: list[AttemptEvent] = []

    def fail(request: ModelRequest) -> str:
        raise ProviderOverloaded("down", status_code=529)

    with observe_attempts(events.append):
        await FunctionModel(lambda r: "ok").request(req())
        with pytest.raises(ProviderOverloaded):
            await FunctionModel(fail).request(req())
    assert len(events) == 2
    assert events[0].error is None and events[0].request_body["messages"] == [
        {"role": "user", "content": "hi"}
    ]
    assert events[0].metadata == {"conversation_id": "c1"}
    assert events[1].error is not None and events[1].error.startswith("ProviderOverloaded")


@pytest.mark.parametrize(("reply", "output_type"), [({"value": "x"}, Answer), ({"a": 1}, None)])
async def test_function_model_bad_reply_is_validation_error(
    reply: object, output_type: type[BaseModel] | None
) -> None:
    with pytest.raises(OutputValidationError):
        await FunctionModel(lambda r: reply).request(req(output_type))  # type: ignore[arg-type, return-value]


async def test_scripted_model_plays_steps_in_order() -> None:
    model = ScriptedModel(
        [
            {"value": 1},
            ProviderOverloaded("down", status_code=503),
            lambda r: f"for {r.expert}",
        ]
    )
    first = await model.request(req(Answer))
    assert first.output == Answer(value=1)
    with pytest.raises(ProviderOverloaded):
        await model.request(req())
    third = await model.request(req(expert="response"))
    assert third.output == "for response"
    assert len(model.calls) == 3 and model.last_call.expert == "response"
    model.assert_complete()
    with pytest.raises(UnexpectedModelCall) as info:
        await model.request(req(expert="summariser"))
    assert info.value.call_index == 3 and info.value.call.expert == "summariser"


async def test_scripted_model_unconsumed_steps() -> None:
    model = ScriptedModel(["a", "b"])
    await model.request(req())
    with pytest.raises(UnconsumedSteps) as info:
        model.assert_complete()
    assert info.value.remaining == ["b"]


def test_last_call_before_any_call() -> None:
    with pytest.raises(AssertionError):
        _ = ScriptedModel([]).last_call
