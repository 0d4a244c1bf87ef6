"""Test doubles for developers of categories: no network, the same `ModelRequest` a real
provider would be sent.

    FunctionModel(fn)     fn(request) -> ModelResponse | str | dict | BaseModel, sync or async
    ScriptedModel(steps)  one step per call, with .calls / .last_call / assert_complete()
"""

from frontdesk.experts.providers.base import ModelRequest, ModelResponse
from frontdesk.experts.providers.function import FunctionModel, FunctionReply
from frontdesk.experts.providers.scripted import ScriptedModel

__all__ = ["FunctionModel", "FunctionReply", "ModelRequest", "ModelResponse", "ScriptedModel"]
