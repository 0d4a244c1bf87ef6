"""A local HTTP server speaking the Anthropic and OpenAI wire formats, scripted per test.

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
