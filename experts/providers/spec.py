"""`model_from_spec`: the one place that turns a model spec string into a `Model`."""

from __future__ import annotations

import difflib
import re

from frontdesk.experts.errors import UnknownModelSpec
from frontdesk.experts.providers._retry import RetryConfig
from frontdesk.experts.providers.base import Model
from frontdesk.masking import scrub

VALID_FORMS = (
    "'anthropic:<model>' (e.g. 'anthropic:claude-sonnet-4-5'), 'openai:<model>'"
    " (e.g. 'openai:gpt-4.1-mini'), 'openai:<model>@<base_url>' (vLLM, Ollama, llama.cpp"
    " server, e.g. 'openai:llama3@http://127.0.0.1:11434/v1'), 'offline', or a Model instance"
)
_PROVIDERS = ("anthropic", "openai")
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")


def model_from_spec(spec: str | Model, *, retry: RetryConfig | None = None) -> Model:
    """The `Model` a spec names; a `Model` instance is passed through.

    Args:
        spec: `anthropic:<model>`, `openai:<model>`, `openai:<model>@<base_url>`, `offline`,
            or a `Model`.
        retry: Retry bounds for the real adapters (default `RetryConfig()`).

    Raises:
        UnknownModelSpec: the spec is none of the valid forms (the message lists them).
        MissingAPIKey: the provider's key is not set.
    """
    if isinstance(spec, Model) and not isinstance(spec, str):
        return spec
    if not isinstance(spec, str):
        raise UnknownModelSpec(
            f"a model spec must be a string or a Model, not {type(spec).__name__}; use "
            + VALID_FORMS
        )
    text = spec.strip()
    if text.lower() == "offline":
        from frontdesk.experts.providers.offline import OfflineModel

        return OfflineModel()
    provider, sep, rest = text.partition(":")
    provider = provider.lower()
    if not sep or provider not in _PROVIDERS:
        raise UnknownModelSpec(
            f"unknown model spec {scrub(spec)!r}{_suggest(provider)}; use " + VALID_FORMS
        )
    name, at, base_url = rest.partition("@")
    name = name.strip()
    if not _MODEL_NAME.match(name):
        raise UnknownModelSpec(
            f"model spec {scrub(spec)!r} names no model after '{provider}:'; use {VALID_FORMS}"
        )
    if provider == "anthropic":
        if at:
            raise UnknownModelSpec(
                f"model spec {scrub(spec)!r}: '@<base_url>' is for OpenAI-compatible servers; for"
                " Anthropic set ANTHROPIC_BASE_URL instead"
            )
        from frontdesk.experts.providers.anthropic import AnthropicModel

        return AnthropicModel(name, retry=retry)
    if at and not re.match(r"^https?://[^\s/@]+", base_url.strip()):
        raise UnknownModelSpec(
            f"model spec {scrub(spec)!r}: the base URL must start with http:// or https:// (and"
            " carry no credentials), e.g. 'openai:llama3@http://127.0.0.1:11434/v1'"
        )
    from frontdesk.experts.providers.openai import OpenAIModel

    return OpenAIModel(name, base_url=base_url.strip() or None, retry=retry)


def _suggest(provider: str) -> str:
    close = difflib.get_close_matches(provider, [*_PROVIDERS, "offline"], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
