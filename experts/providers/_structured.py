"""What both real adapters share about the wire form of a request: where the response
expert's instruction goes, and how structured output is asked for when the schema rides in
the prompt (`output=json_object` or `output=prompt`), with a tolerant parser for the answer.

The instruction is never sent as a trailing assistant message unless a model's settings ask
for it (`instruction=assistant`): servers such as llama.cpp's `llama-server` and Ollama
continue a trailing assistant message (prefill), and the reply would then begin with the
instruction itself, shown to the customer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from frontdesk.experts.providers.base import (
    InstructionPlace,
    Message,
    ModelRequest,
    Output,
    json_schema_of,
)
from frontdesk.labels import INSTRUCTION_LABEL, neutralise

OURS = (INSTRUCTION_LABEL,)
"""The adapters' own label; the summary label is the thread builder's (already neutralised)."""


def split_instruction(request: ModelRequest) -> tuple[list[Message], str | None]:
    """The thread without its trailing assistant message (the response expert's
    instruction), and that instruction (`None` when the thread ends with a user turn)."""
    messages = list(request.messages)
    if not messages or messages[-1]["role"] != "assistant":
        return messages, None
    instruction = messages.pop()["content"]
    return messages, instruction


def labelled(instruction: str) -> str:
    """The instruction as frontdesk's labelled block (its own label neutralised inside)."""
    return f"{INSTRUCTION_LABEL}\n{neutralise(instruction, OURS)}"


def instruction_place(request: ModelRequest) -> InstructionPlace:
    """Where this request's instruction goes: its settings' choice, else `user`."""
    return request.settings.instruction or "user"


SCHEMA_PROMPT_START = "Answer with one JSON object only"
"""How the schema-in-the-prompt text begins (a re-ask then asks for JSON again)."""


def schema_prompt(output_type: type[BaseModel]) -> str:
    """The system text that asks for JSON when no schema is sent as `response_format`."""
    schema = json.dumps(json_schema_of(output_type), separators=(",", ":"))
    return f"{SCHEMA_PROMPT_START}, no other text, valid against this JSON schema:\n{schema}"


def wants_schema_in_prompt(output: Output) -> bool:
    """Whether this output form carries the schema in the prompt."""
    return output in ("json_object", "prompt")


def find_json(text: str) -> str:
    """The JSON object in a model's text: the text itself when it parses, else the first
    balanced `{...}` that does (a small model may wrap it in prose or a code fence)."""
    stripped = text.strip()
    try:
        json.loads(stripped)
        return stripped
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    for start, char in enumerate(text):
        if char != "{":
            continue
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            continue
        if isinstance(value, dict):
            return text[start:end]
    return stripped


def neutralised(messages: Sequence[Message]) -> list[Message]:
    """The thread with any copy of the instruction label a user typed marked."""
    return [Message(role=m["role"], content=neutralise(m["content"], OURS)) for m in messages]


def without_patterns(schema: Any) -> Any:
    """`schema` without the `pattern` of its string fields, for a server whose grammar
    conversion cannot take one (`llama-cpp-python` turns `\\d` into a literal); pydantic
    still checks every pattern on the answer."""
    if isinstance(schema, dict):
        return {
            k: without_patterns(v)
            for k, v in schema.items()
            if not (k == "pattern" and isinstance(v, str) and schema.get("type") == "string")
        }
    if isinstance(schema, list):
        return [without_patterns(v) for v in schema]
    return schema
