"""`AnthropicModel`: the Messages API through `anthropic.AsyncAnthropic`.

Structured output is forced tool use: one tool whose `input_schema` is the output type's
JSON schema, chosen with `tool_choice`. The system prompt and the last message of the
stable prefix carry `cache_control` markers. A trailing assistant message (the response
expert's instruction) is sent as a labelled extra text block of the last user turn (or a
system block, `instruction=system`), since Anthropic would treat a trailing assistant turn
as a prefill to continue (`instruction=assistant` asks for exactly that). With
`output=prompt` the schema rides in the system prompt and the JSON is found in the text.
Every text taken from the request has that label neutralised (`frontdesk.labels`), so it is
the only one on the wire: a user who types it sends a visibly quoted copy.
"""

from __future__ import annotations

import os
import random
from typing import Any

import anthropic
import httpx2

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
    find_json,
    instruction_place,
    labelled,
    schema_prompt,
    split_instruction,
)
from frontdesk.experts.providers.base import (
    ModelRequest,
    ModelSettings,
    OnDelta,
    Usage,
    json_schema_of,
)
from frontdesk.labels import INSTRUCTION_LABEL, neutralise
from frontdesk.masking import mask_url

__all__ = ["INSTRUCTION_LABEL", "AnthropicModel"]

_EPHEMERAL = {"type": "ephemeral"}
# The adapter's own label; the summary label is the thread builder's (already neutralised).
_OURS = (INSTRUCTION_LABEL,)
_SDK_KEYWORDS = frozenset({"model", "max_tokens", "messages", "system", "tools", "tool_choice"})
_TRUNCATED = {"max_tokens", "model_context_window_exceeded"}


class AnthropicModel(HTTPModel):
    """A Claude model on the Anthropic Messages API.

    Args:
        model_name: The Anthropic model id, e.g. `claude-sonnet-4-5`.
        api_key: The key; defaults to `ANTHROPIC_API_KEY`.
        base_url: The API root; defaults to `ANTHROPIC_BASE_URL`, else Anthropic's.
        retry: The retry policy's bounds.
        client: A ready client (its own retries are switched off).
        sleep: Async sleep used between attempts (tests pass a fake clock's).
        clock: Monotonic clock for the total budget.
        rng: Random source for backoff jitter.
        options: Settings from the model spec (`?output=prompt&...`), under each request's.

    Raises:
        MissingAPIKey: when no key is given and `ANTHROPIC_API_KEY` is not set.
    """

    provider = "anthropic"
    key_env = "ANTHROPIC_API_KEY"
    request_id_header = "request-id"
    server_error_type = "api_error"
    sdk_errors = SDKErrors(
        status=anthropic.APIStatusError,
        connection=anthropic.APIConnectionError,
        timeout=anthropic.APITimeoutError,
        base=anthropic.AnthropicError,
    )

    def __init__(
        self,
        model_name: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        retry: RetryConfig | None = None,
        client: anthropic.AsyncAnthropic | None = None,
        sleep: Sleep | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        options: ModelSettings | None = None,
    ) -> None:
        super().__init__(retry=retry, sleep=sleep, clock=clock, rng=rng, options=options)
        self.model_name = model_name
        if client is None:
            api_key = api_key or os.environ.get("ANTHROPIC_API_KEY")
            if not api_key:
                raise MissingAPIKey(
                    f"anthropic:{model_name} needs an API key: set ANTHROPIC_API_KEY or use"
                    " model='offline'"
                )
            base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
            client = anthropic.AsyncAnthropic(
                api_key=api_key,
                base_url=base_url,
                max_retries=0,
                timeout=60.0,
            )
        self._client = client.with_options(max_retries=0)
        self._secret = self._client.api_key
        self.base_url = mask_url(str(self._client.base_url))

    @property
    def name(self) -> str:
        """`anthropic:<model>`."""
        return f"anthropic:{self.model_name}"

    async def aclose(self) -> None:
        """Close the SDK client's HTTP connections."""
        await self._client.close()

    def build_payload(self, request: ModelRequest, reask: list[dict[str, Any]]) -> dict[str, Any]:
        """The Messages API body for `request` (plus re-ask turns), exactly as sent."""
        request = self.settled(request)
        messages, instruction = _wire_messages(request)
        payload: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": request.settings.max_tokens,
            "messages": messages + reask,
        }
        if request.system:
            payload["system"] = [
                {"type": "text", "text": request.system, "cache_control": _EPHEMERAL}
            ]
        if instruction is not None:  # `instruction=system`: after the prompt.
            payload.setdefault("system", []).append({"type": "text", "text": instruction})
        if request.settings.temperature is not None:
            payload["temperature"] = request.settings.temperature
        if request.output_type is not None and request.settings.output == "prompt":
            text = schema_prompt(request.output_type)
            payload.setdefault("system", []).append({"type": "text", "text": text})
        elif request.output_type is not None:
            name = schema_name(request.output_type)
            payload["tools"] = [
                {
                    "name": name,
                    "description": f"Record the answer as a {name} object.",
                    "input_schema": json_schema_of(request.output_type, union=False),
                }
            ]
            payload["tool_choice"] = {"type": "tool", "name": name}
        return payload

    async def _attempt(
        self, request: ModelRequest, reask: list[dict[str, Any]], seconds: float
    ) -> AttemptSuccess[Answer]:
        payload = self.build_payload(request, reask)
        record = AttemptRecord(request_body=to_jsonable(payload))
        headers: dict[str, str] = {}
        try:
            # Fields this SDK version has no keyword for (e.g. temperature) go in extra_body.
            known = {k: v for k, v in payload.items() if k in _SDK_KEYWORDS}
            extra = {k: v for k, v in payload.items() if k not in _SDK_KEYWORDS}
            raw = await self._client.messages.with_raw_response.create(
                **known, extra_body=extra or None, timeout=seconds
            )
            headers = dict(raw.headers)
            record.status_code = raw.status_code
            record.provider_request_id = raw.headers.get("request-id")
            body = await raw.json()
        except (anthropic.AnthropicError, ValueError) as exc:
            raise self._translated(exc, record, headers) from None
        return AttemptSuccess(value=self._parse(request, body, headers, record), record=record)

    def stream_payload(self, request: ModelRequest, reask: list[dict[str, Any]]) -> dict[str, Any]:
        """The Messages API body with `stream: true` (the SSE messages stream)."""
        return {**self.build_payload(request, reask), "stream": True}

    async def _stream_attempt(
        self,
        request: ModelRequest,
        payload: dict[str, Any],
        record: AttemptRecord,
        seconds: float,
        on_delta: OnDelta,
    ) -> AttemptSuccess[Answer]:
        """One attempt over the SSE messages stream, parsed as the whole message."""
        payload = {k: v for k, v in payload.items() if k != "stream"}
        headers: dict[str, str] = {}
        known = {k: v for k, v in payload.items() if k in _SDK_KEYWORDS}
        extra = {k: v for k, v in payload.items() if k not in _SDK_KEYWORDS}
        try:
            stream = await self._client.messages.create(
                **known, stream=True, extra_body=extra or None, timeout=seconds
            )
        except (anthropic.AnthropicError, httpx2.HTTPError, ValueError) as exc:
            raise self._translated(exc, record, headers) from None
        message: dict[str, Any] = {}
        usage: dict[str, Any] = {}
        parts: list[str] = []
        stopped = False
        try:
            headers = dict(stream.response.headers)
            record.status_code = stream.response.status_code
            record.provider_request_id = headers.get("request-id")
            events = stream.__aiter__()
            while (event := await self._next_event(events, record, headers)) is not None:
                if event.type == "message_start":
                    message = event.message.model_dump(mode="json")
                    usage.update(_present(message.get("usage")))
                elif event.type == "content_block_delta" and event.delta.type == "text_delta":
                    parts.append(event.delta.text)
                    await on_delta(event.delta.text)
                elif event.type == "message_delta":
                    message["stop_reason"] = event.delta.stop_reason
                    message["stop_sequence"] = event.delta.stop_sequence
                    usage.update(_present(event.usage.model_dump(mode="json")))
                elif event.type == "message_stop":
                    stopped = True
        finally:
            await stream.close()
        body = {**message, "content": [{"type": "text", "text": "".join(parts)}], "usage": usage}
        if not stopped:
            raise self._ended_early(record, body, "message_stop")
        return AttemptSuccess(value=self._parse(request, body, headers, record), record=record)

    def _parse(
        self, request: ModelRequest, body: Any, headers: dict[str, str], record: AttemptRecord
    ) -> Answer:
        if not isinstance(body, dict) or body.get("type") == "error" or "error" in body:
            raise self._status_failure(200, headers, body, record)
        record.response_body = body
        record.stop_reason = body.get("stop_reason")
        record.usage = _usage(body.get("usage"))
        if record.stop_reason in _TRUNCATED:
            raise AttemptFailure(
                TruncatedOutput(
                    f"anthropic: the answer was cut off ({record.stop_reason}) at"
                    f" max_tokens={request.settings.max_tokens}; raise ModelSettings.max_tokens"
                ),
                record,
            )
        if record.stop_reason == "refusal":
            raise AttemptFailure(Refusal("anthropic: the model refused to answer"), record)
        blocks = [b for b in body.get("content") or [] if isinstance(b, dict)]
        if request.output_type is None:
            text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
            if not text.strip():
                raise invalid_output(record, "the answer was empty", None)
            return Answer(output=text, record=record)
        if request.settings.output == "prompt":
            text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
            output = validate_output(request.output_type, find_json(text), record)
            return Answer(output=output, record=record)
        name = schema_name(request.output_type)
        tool_blocks = [b for b in blocks if b.get("type") == "tool_use" and b.get("name") == name]
        if not tool_blocks:
            raise invalid_output(record, f"no call of the {name} tool in the answer", None)
        output = validate_output(request.output_type, tool_blocks[0].get("input"), record)
        return Answer(output=output, record=record)

    def output_form(self, request_body: Any) -> str | None:
        """`tools` when the body forced a tool call; `None` otherwise."""
        return "tools" if isinstance(request_body, dict) and "tools" in request_body else None

    def _reask_turns(self, failure: AttemptFailure) -> list[dict[str, Any]]:
        body = failure.record.response_body
        blocks = body.get("content") if isinstance(body, dict) else None
        blocks = [b for b in blocks or [] if isinstance(b, dict)]
        problem = str(failure.error)
        tool = next((b for b in blocks if b.get("type") == "tool_use"), None)
        if tool is not None:
            return [
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": tool.get("id"),
                            "name": tool.get("name"),
                            "input": tool.get("input")
                            if isinstance(tool.get("input"), dict)
                            else {},
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": tool.get("id"),
                            "is_error": True,
                            "content": f"{problem}. Call {tool.get('name')} again, corrected.",
                        }
                    ],
                },
            ]
        text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        return [
            {
                "role": "assistant",
                "content": [{"type": "text", "text": text.strip() or "(no answer)"}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": f"{problem}. Please answer again, correctly."}
                ],
            },
        ]


def _wire_messages(request: ModelRequest) -> tuple[list[dict[str, Any]], str | None]:
    """The thread as Anthropic content blocks, with the cache breakpoint and the instruction
    placed as asked; and the instruction's labelled block when it goes to the system."""
    messages, instruction = split_instruction(request)
    place = instruction_place(request)
    if instruction is not None and place == "assistant":
        messages, instruction = list(request.messages), None
    wire: list[dict[str, Any]] = [
        {"role": m["role"], "content": [{"type": "text", "text": neutralise(m["content"], _OURS)}]}
        for m in messages
    ]
    prefix = min(request.cache_prefix_messages, len(wire))
    if prefix > 0:
        wire[prefix - 1]["content"][-1]["cache_control"] = _EPHEMERAL
    if instruction is None:
        return wire, None
    if place == "system":
        return wire, labelled(instruction)
    block = {"type": "text", "text": labelled(instruction)}
    if wire and wire[-1]["role"] == "user":
        wire[-1]["content"].append(block)
    else:
        wire.append({"role": "user", "content": [block]})
    return wire, None


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    return Usage(
        input_tokens=int(raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("output_tokens") or 0),
        cache_read_tokens=int(raw.get("cache_read_input_tokens") or 0),
        cache_write_tokens=int(raw.get("cache_creation_input_tokens") or 0),
    )


def _present(raw: Any) -> dict[str, Any]:
    """The usage fields a stream event actually carries (later events update earlier ones)."""
    return {k: v for k, v in raw.items() if v is not None} if isinstance(raw, dict) else {}
