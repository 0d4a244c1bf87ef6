"""Test doubles for developers of categories: no network, the same `ModelRequest` a real
provider would be sent.

    FunctionModel(fn)     fn(request) -> ModelResponse | str | dict | BaseModel, sync or async
    ScriptedModel(steps)  one step per call, with .calls / .last_call / assert_complete()
    StreamCut(text=, error=)  an answer that streams `text`, then fails (a dropped stream)
    LatencyModel(inner, {expert: Latency(ttft=, tokens_per_second=)})  modelled provider speed
    handler_context(user_id=, conversation_id=, category=, **extras)  a real HandlerContext
                          with in-memory state scopes and a RecordingMemory, to call a
                          handler directly
"""

from frontdesk.devkit.doubles import (
    InMemoryState,
    InMemoryStore,
    RecordingMemory,
    handler_context,
)
from frontdesk.experts.providers.base import ModelRequest, ModelResponse
from frontdesk.experts.providers.function import FunctionModel, FunctionReply, StreamCut
from frontdesk.experts.providers.latency import Latency, LatencyModel
from frontdesk.experts.providers.scripted import ScriptedModel

__all__ = [
    "FunctionModel",
    "FunctionReply",
    "InMemoryState",
    "InMemoryStore",
    "Latency",
    "LatencyModel",
    "ModelRequest",
    "ModelResponse",
    "RecordingMemory",
    "ScriptedModel",
    "StreamCut",
    "handler_context",
]
