"""A local HTTP server speaking the Anthropic and OpenAI wire formats, scripted per test.

It runs uvicorn on 127.0.0.1 (ephemeral port) in a background thread, so the real SDK
clients talk to it over real HTTP. Each path has a queue of scripted replies; every request
is recorded (path, headers, JSON body) so tests count requests and inspect what was sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

ANTHROPIC_PATH = "/v1/messages"
OPENAI_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class Reply:
    """One scripted answer: status, JSON body (or raw text) and headers."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: str | None = None


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
        app = Starlette(
            routes=[
                Route(ANTHROPIC_PATH, self._handle, methods=["POST"]),
                Route(OPENAI_PATH, self._handle, methods=["POST"]),
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
        if reply is None:
            return JSONResponse(
                {"error": {"type": "invalid_request_error", "message": "unscripted request"}},
                status_code=418,
            )
        if reply.raw is not None:
            return Response(
                reply.raw,
                status_code=reply.status,
                headers=reply.headers,
                media_type="application/json",
            )
        return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)


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
