"""model_from_spec: spec strings, env vars, and the errors a caller can act on."""

from __future__ import annotations

import pytest

from frontdesk.errors import MissingAPIKey, UnknownModelSpec
from frontdesk.experts.providers import (
    AnthropicModel,
    FunctionModel,
    ModelRequest,
    OfflineModel,
    OpenAIModel,
    model_from_spec,
)
from tests.experts.providers.wire_server import ANTHROPIC_PATH, Reply, WireServer, anthropic_text

pytestmark = pytest.mark.anyio


def test_offline_and_model_passthrough() -> None:
    assert isinstance(model_from_spec("offline"), OfflineModel)
    double = FunctionModel(lambda request: "hi")
    assert model_from_spec(double) is double


def test_anthropic_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MissingAPIKey, match="set ANTHROPIC_API_KEY or use model='offline'"):
        model_from_spec("anthropic:claude-sonnet-4-5")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env-key-123456789")
    model = model_from_spec("anthropic:claude-sonnet-4-5")
    assert isinstance(model, AnthropicModel) and model.name == "anthropic:claude-sonnet-4-5"


def test_openai_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(MissingAPIKey, match="OPENAI_API_KEY"):
        model_from_spec("openai:gpt-4.1-mini")
    local = model_from_spec("openai:llama3:8b@http://127.0.0.1:11434/v1")
    assert isinstance(local, OpenAIModel)
    assert local.name == "openai:llama3:8b@http://127.0.0.1:11434/v1"
    assert local.model_name == "llama3:8b"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-123456789")
    assert model_from_spec("openai:gpt-4.1-mini").name == "openai:gpt-4.1-mini"


@pytest.mark.parametrize(
    ("spec", "hint"),
    [
        ("antropic:claude-sonnet-4-5", "did you mean 'anthropic'"),
        ("gpt-4.1-mini", "openai:<model>"),
        ("openai:", "names no model"),
        ("openai:gpt@ftp://host", "http://"),
        ("anthropic:claude@http://x", "ANTHROPIC_BASE_URL"),
        ("", "offline"),
    ],
)
def test_unknown_specs_list_the_valid_forms(spec: str, hint: str) -> None:
    with pytest.raises(UnknownModelSpec, match=hint.replace("(", r"\(")):
        model_from_spec(spec)


def test_non_string_spec() -> None:
    with pytest.raises(UnknownModelSpec, match="string or a Model"):
        model_from_spec(42)  # type: ignore[arg-type]


async def test_env_base_url_is_used(wire: WireServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env-key-123456789")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", wire.url)
    wire.script(ANTHROPIC_PATH, Reply(200, anthropic_text("from env")))
    model = model_from_spec("anthropic:claude-test")
    assert isinstance(model, AnthropicModel)
    try:
        request = ModelRequest(expert="t", system="s", messages=[{"role": "user", "content": "x"}])
        assert (await model.request(request)).output == "from env"
    finally:
        await model.aclose()
    [sent] = wire.requests_to(ANTHROPIC_PATH)
    assert any("sk-ant-env-key-123456789" in v for v in sent.headers.values())
