"""A local HTTP server speaking the Anthropic and OpenAI wire formats, scripted per test.

Besides scripted replies it can act like a self-hosted server (`mode`): `LlamaServer`
continues a trailing assistant message (prefill, as llama.cpp's `llama-server` and Ollama
do) and writes JSON that a `response_format` schema allows (grammar-constrained decoding);
`LlamaCppPython` answers `response_format: json_schema` with HTTP 500, as
`llama-cpp-python`'s server did, and takes `json_object`.

A reply is a JSON body, raw text, or a server-sent-event stream (`sse`), which can be cut
(the connection dropped mid-body) or stalled after some events. It runs uvicorn on
127.0.0.1 (ephemeral port) in a background thread, so the real SDK clients talk to it over
real HTTP. Each path has a queue of scripted replies; every request is recorded (path,
headers, JSON body) so tests count requests and inspect what was sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

ANTHROPIC_PATH = "/v1/messages"
OPENAI_PATH = "/v1/chat/completions"
EMBEDDINGS_PATH = "/v1/embeddings"


@dataclass(frozen=True)
class Reply:
    """One scripted answer: status, JSON body (or raw text) and headers."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: str | None = None
    sse: list[tuple[str | None, Any]] | None = None
    """`(event name or None, data)` pairs sent as `text/event-stream` (data `str` as is)."""
    cut_after: int | None = None
    """Drop the connection (no end of the chunked body) after this many events."""
    stall_after: int | None = None
    """Stop sending, connection open, for `stall_seconds` after this many events."""
    stall_seconds: float = 5.0


class CutStream(Exception):
    """Raised inside the event generator: uvicorn drops the connection mid-body."""


@dataclass(frozen=True)
class Received:
    """One request the server got."""

    path: str
    headers: dict[str, str]
    body: Any


class WireServer:
    """The scripted server; `url` is its root, e.g. `http://127.0.0.1:PORT`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._scripts: dict[str, deque[Reply]] = defaultdict(deque)
        self.received: list[Received] = []
        self.mode: LlamaServer | None = None
        """Answers the chat completions that nothing was scripted for, as a self-hosted
        server would (`LlamaServer`, `LlamaCppPython`)."""
        self.embed: Callable[[str], list[float]] | None = None
        """Answers `/v1/embeddings` requests that nothing was scripted for: one vector per
        input text (the tests' stand-in for an embedding model)."""
        app = Starlette(
            routes=[
                Route(ANTHROPIC_PATH, self._handle, methods=["POST"]),
                Route(OPENAI_PATH, self._handle, methods=["POST"]),
                Route(EMBEDDINGS_PATH, self._handle, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", ws="none"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.url = ""

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("wire server did not start")
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def reset(self) -> None:
        with self._lock:
            self._scripts.clear()
            self.received.clear()
            self.embed = None
            self.mode = None

    def script(self, path: str, *replies: Reply) -> None:
        """Queue `replies` for `path`, answered in order."""
        with self._lock:
            self._scripts[path].extend(replies)

    def requests_to(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    async def _handle(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self._lock:
            self.received.append(Received(request.url.path, dict(request.headers), body))
            queue = self._scripts[request.url.path]
            reply = queue.popleft() if queue else None
            embed = self.embed
            mode = self.mode
        if reply is None and mode is not None and request.url.path == OPENAI_PATH:
            reply = mode.answer(body)
        if reply is None and embed is not None and request.url.path == EMBEDDINGS_PATH:
            texts = body["input"] if isinstance(body, dict) else []
            texts = [texts] if isinstance(texts, str) else texts
            return JSONResponse(openai_embeddings([embed(t) for t in texts]))
        if reply is None:
            return JSONResponse(
                {"error": {"type": "invalid_request_error", "message": "unscripted request"}},
                status_code=418,
            )
        if reply.sse is not None:
            return StreamingResponse(
                _events(reply),
                status_code=reply.status,
                headers=reply.headers,
                media_type="text/event-stream",
            )
        if reply.raw is not None:
            return Response(
                reply.raw,
                status_code=reply.status,
                headers=reply.headers,
                media_type="application/json",
            )
        return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)


async def _events(reply: Reply) -> AsyncIterator[bytes]:
    assert reply.sse is not None
    for index, (event, data) in enumerate(reply.sse):
        if reply.cut_after is not None and index == reply.cut_after:
            raise CutStream("the test asked to drop the connection here")
        if reply.stall_after is not None and index == reply.stall_after:
            await asyncio.sleep(reply.stall_seconds)
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {event}\n" if event else ""
        yield f"{head}data: {text}\n\n".encode()
        await asyncio.sleep(0.001)  # separate TCP writes, as a provider sends them


def anthropic_sse(
    texts: list[str],
    *,
    stop_reason: str | None = "end_turn",
    usage: dict[str, int] | None = None,
    output_tokens: int = 5,
) -> list[tuple[str | None, Any]]:
    """A Messages API stream: message_start, one text block of `texts` deltas, the stop."""
    start_usage = {"input_tokens": 10, "output_tokens": 1, **(usage or {})}
    message = {**anthropic_message([], usage=start_usage), "stop_reason": None}
    events: list[tuple[str | None, Any]] = [
        ("message_start", {"type": "message_start", "message": message}),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}},
        )
        for t in texts
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return events


def openai_sse(
    texts: list[str],
    *,
    finish_reason: str | None = "stop",
    refusal: list[str] | None = None,
    usage: dict[str, Any] | None = None,
) -> list[tuple[str | None, Any]]:
    """`chat.completion.chunk`s: the role, `texts` deltas, the finish, a usage chunk, [DONE]."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "gpt-test",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": None,
        }

    events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
    events += [(None, chunk({"content": t})) for t in texts]
    events += [(None, chunk({"refusal": r})) for r in refusal or []]
    events.append((None, chunk({}, finish_reason)))
    final = {
        **chunk({}),
        "choices": [],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    events += [(None, final), (None, "[DONE]")]
    return events


def anthropic_message(
    content: list[dict[str, Any]],
    *,
    stop_reason: str = "end_turn",
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A Messages API success body."""
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 10, "output_tokens": 5},
    }


def anthropic_text(text: str, **kwargs: Any) -> dict[str, Any]:
    return anthropic_message([{"type": "text", "text": text}], **kwargs)


def anthropic_tool(name: str, data: Any, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("stop_reason", "tool_use")
    return anthropic_message(
        [{"type": "tool_use", "id": "toolu_1", "name": name, "input": data}], **kwargs
    )


def anthropic_error(kind: str, message: str = "error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def openai_completion(
    content: str | None,
    *,
    finish_reason: str = "stop",
    refusal: str | None = None,
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Chat Completions success body."""
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def openai_error(kind: str, message: str = "error", code: str | None = None) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message, "code": code, "param": None}}


def openai_embeddings(vectors: list[list[float]]) -> dict[str, Any]:
    """An embeddings success body: one vector per input, in order."""
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)
        ],
        "model": "embed-test",
        "usage": {"prompt_tokens": 3 * len(vectors), "total_tokens": 3 * len(vectors)},
    }


@dataclass
class LlamaServer:
    """Acts like llama.cpp's `llama-server` on `/v1/chat/completions`.

    A trailing assistant message is continued (prefill): the answer starts where that
    message stops, so a "model" that carries on from it repeats it first (`text` is what it
    writes after). Structured output is grammar-constrained: with `response_format`
    `json_schema` (or `json_object` with a schema in the prompt) the answer is `wants`'s
    value for the schema's title, forced into the schema's shape (the first branch of a
    union it fits, missing required fields filled, unknown keys and enum values replaced),
    as a grammar would force it; without a schema, the wanted value as the model wrote it.
    """

    text: str = "Thank you, that is all sorted."
    wants: dict[str, Any] = field(default_factory=dict)
    """Schema title -> what the "model" would write (a dict, or raw text for no grammar)."""
    seen: list[dict[str, Any]] = field(default_factory=list)
    """The request bodies answered."""

    def answer(self, body: Any) -> Reply:
        assert isinstance(body, dict)
        self.seen.append(body)
        refused = self.refuse(body)
        if refused is not None:
            return refused
        messages = body.get("messages") or []
        schema = _schema_of(body)
        if schema is not None:
            wanted = self.wants.get(str(schema.get("title", "")), {})
            return Reply(body=openai_completion(json.dumps(constrained(wanted, schema))))
        title = _title_in_prompt(messages)
        if title is not None:  # Schema in the prompt, no grammar: whatever the model writes.
            wanted = self.wants.get(title, "")
            text = wanted if isinstance(wanted, str) else json.dumps(wanted)
            return Reply(body=openai_completion(text))
        last = messages[-1] if messages else {}
        if last.get("role") == "assistant":  # Prefill: continue the assistant's message.
            return Reply(body=openai_completion(f"{last.get('content', '')} {self.text}"))
        return Reply(body=openai_completion(self.text))

    def refuse(self, body: dict[str, Any]) -> Reply | None:
        """A request this server refuses (none: llama-server takes every form)."""
        return None


@dataclass
class LlamaCppPython(LlamaServer):
    """Acts like `llama-cpp-python`'s server: HTTP 500 on `response_format: json_schema`
    (frontdesk once reported it as an overloaded provider and retried), `json_object` and
    the schema in the prompt answered as `LlamaServer` does."""

    def refuse(self, body: dict[str, Any]) -> Reply | None:
        response_format = body.get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
            return Reply(
                500,
                {
                    "error": {
                        "message": "Exception: Unsupported response_format type: json_schema",
                        "type": "internal_server_error",
                    }
                },
            )
        return None


def _schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    """The schema a grammar would be built from: `response_format`'s, or for `json_object`
    the one the prompt carries."""
    response_format = body.get("response_format")
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_schema":
        schema: dict[str, Any] = response_format["json_schema"]["schema"]
        return schema
    if response_format.get("type") == "json_object":
        return _prompt_schema(body.get("messages") or []) or {"type": "object"}
    return None


def _prompt_schema(messages: list[dict[str, Any]]) -> dict[str, Any] | None:
    for message in messages:
        content = str(message.get("content", ""))
        if message.get("role") == "system" and content.startswith("Answer with one JSON"):
            found: dict[str, Any] = json.loads(content.split("\n", 1)[1])
            return found
    return None


def _title_in_prompt(messages: list[dict[str, Any]]) -> str | None:
    schema = _prompt_schema(messages)
    return None if schema is None else str(schema.get("title", ""))


def constrained(value: Any, schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """`value` forced into `schema`'s shape, as grammar-constrained decoding would force it."""
    defs = schema.get("$defs", defs or {})
    if "$ref" in schema:
        return constrained(value, defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        for branch in branches:
            if constrained(value, branch, defs) == value:
                return value
        return constrained(value, branches[0], defs)
    if "enum" in schema:
        return value if value in schema["enum"] else schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if kind == "object" or "properties" in schema:
        given = value if isinstance(value, dict) else {}
        props = schema.get("properties", {})
        out = {k: constrained(v, props[k], defs) for k, v in given.items() if k in props}
        for name in schema.get("required", []):
            if name not in out:
                out[name] = constrained(None, props.get(name, {}), defs)
        return out
    if kind == "array":
        items = value if isinstance(value, list) else []
        return [constrained(v, schema.get("items", {}), defs) for v in items]
    return _scalar(value, kind, schema)


def _scalar(value: Any, kind: Any, schema: dict[str, Any]) -> Any:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return value if isinstance(value, str) else "x"
    if kind == "integer":
        return value if number and isinstance(value, int) else int(schema.get("minimum", 1))
    if kind == "number":
        return value if number else 1
    if kind == "boolean":
        return value if isinstance(value, bool) else False
    if kind == "null":
        return None
    return value
