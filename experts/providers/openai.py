"""`OpenAIModel`: Chat Completions through `openai.AsyncOpenAI`, for OpenAI and compatibles.

Any OpenAI-compatible server (vLLM, Ollama, llama.cpp server) works through a base URL;
no key is needed then. Structured output uses `response_format` `json_schema` with
`strict: false` (strict mode would force every field required and rewrite the schema), or
the form the spec's `output=` names (`json_object`, `tools`, `prompt`), and the answer is
validated by pydantic. The response expert's instruction is a labelled block after the
latest user message (`instruction=user`), or a system message (`instruction=system`):
never a trailing assistant message, which compatible servers continue (prefill), unless
`instruction=assistant` asks for it. OpenAI caches prompt prefixes on its own; the cached
part is reported as `cache_read_tokens`.
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import httpx2
import openai

from frontdesk.errors import MissingAPIKey, Refusal, TruncatedOutput
from frontdesk.experts.providers._http import (
    Answer,
    HTTPModel,
    SDKErrors,
    invalid_output,
    schema_name,
    to_jsonable,
    validate_output,
)
from frontdesk.experts.providers._retry import (
    AttemptFailure,
    AttemptRecord,
    AttemptSuccess,
    Clock,
    RetryConfig,
    Sleep,
)
from frontdesk.experts.providers._structured import (
    SCHEMA_PROMPT_START,
    find_json,
    instruction_place,
    labelled,
    neutralised,
    schema_prompt,
    split_instruction,
    wants_schema_in_prompt,
    without_patterns,
)
from frontdesk.experts.providers.base import (
    ModelRequest,
    ModelSettings,
    OnDelta,
    Output,
    Usage,
    json_schema_of,
)
from frontdesk.masking import mask_url

PLACEHOLDER_KEY = "not-needed"
"""Sent as the key to an OpenAI-compatible server given by base URL when no key is set."""


class OpenAIModel(HTTPModel):
    """A chat model on OpenAI's Chat Completions API, or on a compatible server.

    Args:
        model_name: The model id, e.g. `gpt-4.1-mini`, or a local server's model name.
        api_key: The key; defaults to `OPENAI_API_KEY` (optional when a base URL is set).
        base_url: The API root, e.g. `http://127.0.0.1:8000/v1`; defaults to
            `OPENAI_BASE_URL`, else OpenAI's.
        retry: The retry policy's bounds.
        client: A ready client (its own retries are switched off).
        sleep: Async sleep used between attempts (tests pass a fake clock's).
        clock: Monotonic clock for the total budget.
        rng: Random source for backoff jitter.
        options: Settings from the model spec (`?output=json_object&...`), under each
            request's own.

    Raises:
        MissingAPIKey: when neither a key nor a base URL is given.
    """

    provider = "openai"
    key_env = "OPENAI_API_KEY"
    request_id_header = "x-request-id"
    server_error_type = "server_error"
    sdk_errors = SDKErrors(
        status=openai.APIStatusError,
        connection=openai.APIConnectionError,
        timeout=openai.APITimeoutError,
        base=openai.OpenAIError,
    )

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        retry: RetryConfig | None = None,
        client: openai.AsyncOpenAI | None = None,
        sleep: Sleep | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        options: ModelSettings | None = None,
    ) -> None:
        super().__init__(retry=retry, sleep=sleep, clock=clock, rng=rng, options=options)
        self.model_name = model_name
        self._spec_base_url = base_url
        if client is None:
            api_key = api_key or os.environ.get("OPENAI_API_KEY")
            base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
            if not api_key:
                if base_url is None:
                    raise MissingAPIKey(
                        f"openai:{model_name} needs an API key: set OPENAI_API_KEY, give an"
                        " OpenAI-compatible server as 'openai:NAME@BASE_URL', or use"
                        " model='offline'"
                    )
                api_key = PLACEHOLDER_KEY
            client = openai.AsyncOpenAI(
                api_key=api_key, base_url=base_url, max_retries=0, timeout=60.0
            )
        self._client = client.with_options(max_retries=0)
        key = self._client.api_key
        self._secret = key if isinstance(key, str) and key != PLACEHOLDER_KEY else None
        self.base_url = mask_url(str(self._client.base_url))
        self._compatible = base_url is not None

    @property
    def name(self) -> str:
        """`openai:<model>`, or `openai:<model>@<base_url>` for a server given by URL.

        A password in the base URL is masked: the name goes into every log line and audit row.
        """
        if self._spec_base_url:
            return f"openai:{self.model_name}@{mask_url(self._spec_base_url)}"
        return f"openai:{self.model_name}"

    async def aclose(self) -> None:
        """Close the SDK client's HTTP connections."""
        await self._client.close()

    def build_payload(self, request: ModelRequest, reask: list[dict[str, Any]]) -> dict[str, Any]:
        """The Chat Completions body for `request` (plus re-ask turns), exactly as sent.

        The response expert's instruction goes where `ModelSettings.instruction` says (a
        labelled block after the latest user message by default), never as a trailing
        assistant message unless `instruction="assistant"`; structured output takes the
        form `ModelSettings.output` names (`json_schema` by default)."""
        request = self.settled(request)
        output = self.output_of(request)
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        if request.output_type is not None and wants_schema_in_prompt(output):
            messages.append({"role": "system", "content": schema_prompt(request.output_type)})
        messages.extend(_thread(request))
        payload: dict[str, Any] = {"model": self.model_name, "messages": messages + reask}
        # Compatible servers know `max_tokens`; OpenAI's newer models only take the other.
        token_field = "max_tokens" if self._compatible else "max_completion_tokens"
        payload[token_field] = request.settings.max_tokens
        if request.settings.temperature is not None:
            payload["temperature"] = request.settings.temperature
        if request.output_type is None:
            return payload
        name = schema_name(request.output_type)
        if output == "json_schema":
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": name,
                    "schema": json_schema_of(request.output_type),
                    "strict": False,
                },
            }
        elif output == "json_object":
            payload["response_format"] = {"type": "json_object"}
        elif output == "tools":
            # A compatible server builds a grammar from the parameters: the tagged union (so
            # it enforces the choice), without patterns (its converter may not take them).
            parameters = json_schema_of(request.output_type, union=self._compatible)
            if self._compatible:
                parameters = without_patterns(parameters)
            payload["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": f"Record the answer as a {name} object.",
                        "parameters": parameters,
                    },
                }
            ]
            payload["tool_choice"] = {"type": "function", "function": {"name": name}}
        return payload

    @staticmethod
    def output_of(request: ModelRequest) -> Output:
        """The structured-output form of `request` (`json_schema` unless set)."""
        return request.settings.output or "json_schema"

    def output_form(self, request_body: Any) -> str | None:
        """`json_schema`, `json_object` or `tools` from a sent body; `None` otherwise."""
        if not isinstance(request_body, dict):
            return None
        if "tools" in request_body:
            return "tools"
        response_format = request_body.get("response_format")
        if isinstance(response_format, dict):
            kind = response_format.get("type")
            return kind if kind in ("json_schema", "json_object") else None
        return None

    def other_outputs(self, form: str) -> tuple[str, ...]:
        """The forms to try instead: the schema in the prompt first."""
        return tuple(o for o in ("json_object", "prompt", "tools") if o != form)

    async def _attempt(
        self, request: ModelRequest, reask: list[dict[str, Any]], seconds: float
    ) -> AttemptSuccess[Answer]:
        payload = self.build_payload(request, reask)
        record = AttemptRecord(request_body=to_jsonable(payload))
        headers: dict[str, str] = {}
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                **payload, timeout=seconds
            )
            headers = dict(raw.headers)
            record.status_code = raw.status_code
            record.provider_request_id = raw.headers.get("x-request-id")
            body = json.loads(raw.content)
        except (openai.OpenAIError, ValueError) as exc:
            raise self._translated(exc, record, headers) from None
        return AttemptSuccess(value=self._parse(request, body, headers, record), record=record)

    def stream_payload(self, request: ModelRequest, reask: list[dict[str, Any]]) -> dict[str, Any]:
        """The Chat Completions body with `stream: true` and a final usage chunk asked for."""
        return {
            **self.build_payload(request, reask),
            "stream": True,
            "stream_options": {"include_usage": True},
        }

    async def _stream_attempt(
        self,
        request: ModelRequest,
        payload: dict[str, Any],
        record: AttemptRecord,
        seconds: float,
        on_delta: OnDelta,
    ) -> AttemptSuccess[Answer]:
        """One attempt over `chat.completion.chunk`s, with a final usage chunk, parsed whole."""
        headers: dict[str, str] = {}
        try:
            stream = await self._client.chat.completions.create(**payload, timeout=seconds)
        except (openai.OpenAIError, httpx2.HTTPError, ValueError) as exc:
            raise self._translated(exc, record, headers) from None
        parts: list[str] = []
        refusal: list[str] = []
        finish: str | None = None
        usage: Any = None
        ids: dict[str, Any] = {}
        try:
            headers = dict(stream.response.headers)
            record.status_code = stream.response.status_code
            record.provider_request_id = headers.get("x-request-id")
            chunks = stream.__aiter__()
            while (chunk := await self._next_event(chunks, record, headers)) is not None:
                ids = {"id": chunk.id, "model": chunk.model, "created": chunk.created}
                if chunk.usage is not None:
                    usage = chunk.usage.model_dump(mode="json")
                for choice in chunk.choices:
                    if choice.index != 0:
                        continue
                    if choice.delta.refusal:
                        refusal.append(choice.delta.refusal)
                    if choice.delta.content:
                        parts.append(choice.delta.content)
                        await on_delta(choice.delta.content)
                    if choice.finish_reason is not None:
                        finish = choice.finish_reason
        finally:
            await stream.close()
        message = {
            "role": "assistant",
            "content": "".join(parts) or None,
            "refusal": "".join(refusal) or None,
        }
        body = {
            **ids,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }
        if finish is None:
            raise self._ended_early(record, body, "a finish_reason")
        return AttemptSuccess(value=self._parse(request, body, headers, record), record=record)

    def _parse(
        self, request: ModelRequest, body: Any, headers: dict[str, str], record: AttemptRecord
    ) -> Answer:
        if not isinstance(body, dict) or body.get("error") or not body.get("choices"):
            if isinstance(body, dict) and not body.get("error"):
                body = {"error": {"type": "server_error", "message": "no choices in the answer"}}
            raise self._status_failure(200, headers, body, record)
        record.response_body = body
        first = body["choices"][0]
        choice: dict[str, Any] = first if isinstance(first, dict) else {}
        found = choice.get("message")
        message: dict[str, Any] = found if isinstance(found, dict) else {}
        record.stop_reason = choice.get("finish_reason")
        record.usage = _usage(body.get("usage"))
        if record.stop_reason == "length":
            raise AttemptFailure(
                TruncatedOutput(
                    f"openai: the answer was cut off (length) at"
                    f" max_tokens={request.settings.max_tokens}; raise ModelSettings.max_tokens"
                ),
                record,
            )
        if message.get("refusal") or record.stop_reason == "content_filter":
            raise AttemptFailure(Refusal("openai: the model refused to answer"), record)
        content = message.get("content")
        text = content if isinstance(content, str) else ""
        if request.output_type is not None and self.output_of(request) == "tools":
            text = _tool_arguments(message) or text
        if not text.strip():
            raise invalid_output(record, "the answer was empty", None)
        if request.output_type is None:
            return Answer(output=text, record=record)
        output = validate_output(request.output_type, find_json(text), record)
        return Answer(output=output, record=record)

    def _reask_turns(self, failure: AttemptFailure) -> list[dict[str, Any]]:
        body = failure.record.response_body
        text = ""
        try:
            message = body["choices"][0]["message"]
            text = _tool_arguments(message) or str(message["content"] or "")
        except (KeyError, IndexError, TypeError):
            pass
        fix = "Reply again with only the corrected JSON." if self._wants_json(failure) else ""
        return [
            {"role": "assistant", "content": text.strip() or "(no answer)"},
            {"role": "user", "content": f"{failure.error}. {fix}".strip()},
        ]

    @staticmethod
    def _wants_json(failure: AttemptFailure) -> bool:
        body = failure.record.request_body
        if not isinstance(body, dict):
            return False
        if "response_format" in body or "tools" in body:
            return True
        messages = body.get("messages")
        return isinstance(messages, list) and any(
            isinstance(m, dict) and str(m.get("content", "")).startswith(SCHEMA_PROMPT_START)
            for m in messages
        )


def _thread(request: ModelRequest) -> list[dict[str, Any]]:
    """The thread as Chat Completions messages, the instruction placed as asked."""
    messages, instruction = split_instruction(request)
    place = instruction_place(request)
    if instruction is None or place == "assistant":
        return [{"role": m["role"], "content": m["content"]} for m in request.messages]
    wire: list[dict[str, Any]] = [
        {"role": m["role"], "content": m["content"]} for m in neutralised(messages)
    ]
    block = labelled(instruction)
    if place == "system":
        wire.append({"role": "system", "content": block})
    elif wire and wire[-1]["role"] == "user":
        wire[-1]["content"] = f"{wire[-1]['content']}\n\n{block}"
    else:
        wire.append({"role": "user", "content": block})
    return wire


def _tool_arguments(message: dict[str, Any]) -> str:
    """The arguments of the answer's first tool call, as JSON text ("" when none)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
        return ""
    function = calls[0].get("function")
    arguments = function.get("arguments") if isinstance(function, dict) else None
    if isinstance(arguments, dict):
        return json.dumps(arguments)
    return arguments if isinstance(arguments, str) else ""


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt = int(raw.get("prompt_tokens") or 0)
    details = raw.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=int(raw.get("completion_tokens") or 0),
        cache_read_tokens=cached,
    )
