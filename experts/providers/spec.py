"""`model_from_spec`: the one place that turns a model spec string into a `Model`."""

from __future__ import annotations

import difflib
import math
import re
from typing import Any
from urllib.parse import parse_qsl

from frontdesk.errors import UnknownModelSpec
from frontdesk.experts.providers._retry import RetryConfig
from frontdesk.experts.providers.base import (
    INSTRUCTION_PLACES,
    OUTPUTS,
    Model,
    ModelSettings,
)
from frontdesk.masking import scrub

VALID_FORMS = (
    "'anthropic:<model>' (e.g. 'anthropic:claude-sonnet-4-5'), 'openai:<model>'"
    " (e.g. 'openai:gpt-4.1-mini'), 'openai:<model>@<base_url>' (vLLM, Ollama, llama.cpp"
    " server, e.g. 'openai:llama3@http://127.0.0.1:11434/v1'), any of them followed by"
    " '?setting=value&...' (output, context_tokens, temperature, timeout, instruction,"
    " concurrency), 'offline', or a Model instance"
)
OPTIONS = ("output", "context_tokens", "temperature", "timeout", "instruction", "concurrency")
"""The settings a spec's query string may give (`ModelSettings` fields of the same names)."""
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
    text, _, query = text.partition("?")
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

        options = spec_options(spec, query, provider="anthropic")
        return AnthropicModel(name, retry=retry, options=options)
    if at and not re.match(r"^https?://[^\s/@]+", base_url.strip()):
        raise UnknownModelSpec(
            f"model spec {scrub(spec)!r}: the base URL must start with http:// or https:// (and"
            " carry no credentials), e.g. 'openai:llama3@http://127.0.0.1:11434/v1'"
        )
    from frontdesk.experts.providers.openai import OpenAIModel

    options = spec_options(spec, query, provider="openai")
    return OpenAIModel(name, base_url=base_url.strip() or None, retry=retry, options=options)


def spec_options(spec: str, query: str, *, provider: str) -> ModelSettings:
    """The `ModelSettings` a spec's query string gives (`output=json_object&...`).

    Raises:
        UnknownModelSpec: an unknown setting, or a value it cannot take (the message says
            which values it can).
    """
    values: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        where = f"model spec {scrub(spec)!r}: {key}={value!r}"
        if key not in OPTIONS:
            raise UnknownModelSpec(
                f"model spec {scrub(spec)!r}: unknown setting {key!r}{_close(key, OPTIONS)};"
                f" a spec may set {', '.join(OPTIONS)}"
            )
        if key in values:
            raise UnknownModelSpec(f"{where}: {key} is given twice")
        values[key] = _option(key, value, where, provider)
    return ModelSettings(**values)


def _option(key: str, value: str, where: str, provider: str) -> Any:
    if key == "output":
        allowed = OUTPUTS if provider == "openai" else ("tools", "prompt")
        if value not in allowed:
            raise UnknownModelSpec(f"{where}: {provider} takes output={' | '.join(allowed)}")
        return value
    if key == "instruction":
        if value not in INSTRUCTION_PLACES:
            raise UnknownModelSpec(f"{where}: use instruction={' | '.join(INSTRUCTION_PLACES)}")
        return value
    if key in ("context_tokens", "concurrency"):
        if not re.fullmatch(r"[1-9][0-9]{0,8}", value):
            raise UnknownModelSpec(f"{where}: {key} is a whole number >= 1")
        return int(value)
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if key == "temperature" and (not math.isfinite(number) or not 0 <= number <= 2):
        raise UnknownModelSpec(f"{where}: temperature is a number from 0 to 2")
    if key == "timeout" and (not math.isfinite(number) or number <= 0):
        raise UnknownModelSpec(f"{where}: timeout is a number of seconds > 0")
    return number


def _close(word: str, choices: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _suggest(provider: str) -> str:
    close = difflib.get_close_matches(provider, [*_PROVIDERS, "offline"], n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
