"""Model providers: the `Model` protocol, real adapters, the offline stand-in and test doubles."""

from experts.providers.base import (
    AttemptEvent,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    PromptRef,
    Usage,
    observe_attempts,
)

__all__ = [
    "AttemptEvent",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "PromptRef",
    "Usage",
    "observe_attempts",
]
