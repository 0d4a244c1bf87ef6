"""Errors raised by the experts and the model layer.

    FrontdeskError
    ├── UserError
    │   ├── ConfigError
    │   │   ├── UnknownModelSpec        a model spec frontdesk cannot parse
    │   │   └── MissingAPIKey           the provider's key is not set
    │   ├── ModelRequestsBlocked        a real provider call while they are switched off
    │   ├── UnexpectedModelCall         a ScriptedModel was called after its script ran out
    │   └── UnconsumedSteps             a ScriptedModel still holds steps at assert_complete()
    └── ModelError                      a model call failed (provider errors translated here)
        ├── ModelAPIError               a provider answered with a non-retryable error
        │   ├── ModelHTTPError          ... with an HTTP status (status_code, body, headers)
        │   ├── ProviderQuotaExhausted  money ran out (429 insufficient_quota / spend limit)
        │   ├── RateLimited             429 still failing, or retry-after beyond the budget
        │   └── ProviderOverloaded      529/5xx for the whole attempt budget
        ├── ModelConnectionError        unreachable host, connection reset, timeout
        ├── TruncatedOutput             stopped by max_tokens / length
        ├── Refusal                     the model refused
        └── OutputValidationError       structured output failed validation after re-asking

No `anthropic.*` or `openai.*` exception ever crosses the adapter boundary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from frontdesk.errors import ConfigError, FrontdeskError, UserError


class UnknownModelSpec(ConfigError):
    """A model spec that is not `anthropic:NAME`, `openai:NAME[@BASE_URL]`, `offline` or a Model."""


class MissingAPIKey(ConfigError):
    """A provider was asked for but its API key is not set."""


class ModelRequestsBlocked(UserError):
    """A real provider call was made while `ALLOW_MODEL_REQUESTS` is `False`."""


class UnexpectedModelCall(UserError, AssertionError):
    """A `ScriptedModel` was called more times than it has steps (a test expectation failed)."""

    def __init__(self, call: Any, call_index: int) -> None:
        expert = getattr(call, "expert", "?")
        super().__init__(
            f"ScriptedModel has no step left for call #{call_index} (expert {expert!r});"
            " add a step to the script or check why the code calls the model again"
        )
        self.call = call
        self.call_index = call_index


class UnconsumedSteps(UserError, AssertionError):
    """A `ScriptedModel` still holds steps when the test says the script is complete."""

    def __init__(self, remaining: list[Any]) -> None:
        super().__init__(
            f"ScriptedModel has {len(remaining)} unconsumed step(s); the code made fewer model"
            " calls than the script expects"
        )
        self.remaining = remaining


class ModelError(FrontdeskError):
    """A model call failed; `model` names the spec, `attempts` the HTTP attempts spent."""

    def __init__(self, message: str, *, model: str = "", attempts: int = 1) -> None:
        super().__init__(message)
        self.model = model
        self.attempts = attempts


class ModelAPIError(ModelError):
    """The provider answered with an error that retrying will not fix."""


class ModelHTTPError(ModelAPIError):
    """A provider error with an HTTP status; headers are lowercased."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        model: str = "",
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message, model=model, attempts=attempts)
        self.status_code = status_code
        self.body = body
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}


class ProviderQuotaExhausted(ModelHTTPError):
    """The account is out of credit or over its spend limit: never retried."""


class RateLimited(ModelHTTPError):
    """Rate limited past the retry budget; `retry_after` is the provider's wait in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ProviderOverloaded(ModelHTTPError):
    """529 / 5xx on every attempt of the budget."""


class ModelConnectionError(ModelError):
    """The provider could not be reached (connection refused or reset, timeout)."""


class TruncatedOutput(ModelError):
    """The answer was cut off by the token limit; never half-parsed."""


class Refusal(ModelError):
    """The model refused to answer."""


class OutputValidationError(ModelError):
    """Structured output failed validation even after re-asking with the error shown."""

    def __init__(self, message: str, *, last_response: Any = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.last_response = last_response
