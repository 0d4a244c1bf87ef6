"""Model providers: the `Model` protocol, real adapters, the offline stand-in and test doubles.

`AnthropicModel` and `OpenAIModel` are imported on first use, so that importing the
package (and the offline path) does not load both SDKs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from frontdesk.experts.providers._retry import RetryConfig
from frontdesk.experts.providers.base import (
    AttemptEvent,
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    PromptRef,
    Speculation,
    StreamDone,
    StreamEvent,
    StreamingModel,
    TextDelta,
    Usage,
    observe_attempts,
    request_streaming,
    stream_of,
)
from frontdesk.experts.providers.calibrated import CalibratedModel
from frontdesk.experts.providers.fallback import FallbackModel
from frontdesk.experts.providers.function import FunctionModel, StreamCut
from frontdesk.experts.providers.latency import Latency, LatencyModel
from frontdesk.experts.providers.offline import OfflineModel
from frontdesk.experts.providers.scripted import ScriptedModel
from frontdesk.experts.providers.spec import model_from_spec

if TYPE_CHECKING:
    from frontdesk.experts.providers.anthropic import AnthropicModel
    from frontdesk.experts.providers.openai import OpenAIModel

__all__ = [
    "AnthropicModel",
    "AttemptEvent",
    "CalibratedModel",
    "FallbackModel",
    "FunctionModel",
    "Latency",
    "LatencyModel",
    "Message",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "OfflineModel",
    "OpenAIModel",
    "PromptRef",
    "RetryConfig",
    "ScriptedModel",
    "Speculation",
    "StreamCut",
    "StreamDone",
    "StreamEvent",
    "StreamingModel",
    "TextDelta",
    "Usage",
    "model_from_spec",
    "observe_attempts",
    "request_streaming",
    "stream_of",
]


def __getattr__(name: str) -> Any:
    if name == "AnthropicModel":
        from frontdesk.experts.providers.anthropic import AnthropicModel

        return AnthropicModel
    if name == "OpenAIModel":
        from frontdesk.experts.providers.openai import OpenAIModel

        return OpenAIModel
    raise AttributeError(f"module 'frontdesk.experts.providers' has no attribute {name!r}")
