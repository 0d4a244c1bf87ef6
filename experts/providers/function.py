"""`FunctionModel`: a test double that answers each request by calling a Python function.

The function receives exactly the `ModelRequest` a real adapter would be sent, and returns
a `ModelResponse`, a `str`, a `dict` or a pydantic object (sync or async); dicts and JSON
strings are validated into `request.output_type` as a provider's answer would be. Raising
from the function simulates a provider error. Each call is reported as one attempt.

The doubles stream too: a text answer is handed out in chunks of a few words, and a
`StreamCut` answer streams its text and then fails, as a dropped provider stream does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, TypeAlias

from pydantic import BaseModel, ValidationError

from frontdesk.errors import ModelError, OutputValidationError, StreamInterrupted
from frontdesk.experts.providers._http import describe_validation_error, strip_code_fence
from frontdesk.experts.providers.base import (
    AttemptEvent,
    ModelRequest,
    ModelResponse,
    StreamDone,
    StreamEvent,
    TextDelta,
    plain_messages,
    report_attempt,
)

DEFAULT_CHUNK_CHARS = 24
"""About how many characters a double's streamed text delta holds (whole words)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StreamCut:
    """A double's answer that streams `text`, then fails with `error` (a dropped stream).

    Streamed, the consumer gets `text` in deltas and then `StreamInterrupted` (or `error`
    itself when `text` is empty: a failure before the first delta). Asked with `request`,
    it raises `error` at once.
    """

    text: str
    error: ModelError


FunctionReply: TypeAlias = ModelResponse | str | dict[str, Any] | BaseModel | StreamCut
"""What a double's function or script step may answer with."""
ModelFunction: TypeAlias = Callable[[ModelRequest], FunctionReply | Awaitable[FunctionReply]]
"""`fn(request) -> FunctionReply`, sync or async."""


def request_body(request: ModelRequest) -> dict[str, Any]:
    """A JSON-able view of `request`, recorded as a double's attempt `request_body`."""
    return {
        "expert": request.expert,
        "system": request.system,
        "messages": plain_messages(request.messages),
        "output_type": request.output_type.__name__ if request.output_type else None,
        "max_tokens": request.settings.max_tokens,
    }


def to_response(reply: Any, request: ModelRequest, model: str) -> ModelResponse:
    """Turn a double's reply into the `ModelResponse` a real adapter would return.

    Raises:
        OutputValidationError: the reply does not fit `request.output_type`.
    """
    if isinstance(reply, StreamCut):
        raise reply.error
    if isinstance(reply, ModelResponse):
        return reply if reply.model else dataclasses.replace(reply, model=model)
    output_type = request.output_type
    try:
        if output_type is None:
            if not isinstance(reply, str):
                raise OutputValidationError(
                    f"{model}: the {request.expert} expert asked for text, but the double"
                    f" returned {type(reply).__name__}; return a str",
                    model=model,
                )
            output: Any = reply
        elif isinstance(reply, output_type):
            output = reply
        elif isinstance(reply, str):
            output = output_type.model_validate_json(strip_code_fence(reply))
        elif isinstance(reply, BaseModel):
            output = output_type.model_validate(reply.model_dump())
        elif isinstance(reply, dict) or dataclasses.is_dataclass(reply):
            output = output_type.model_validate(reply)  # A dataclass: triage's `Clarify`.
        else:
            raise OutputValidationError(
                f"{model}: cannot turn {type(reply).__name__} into {output_type.__name__};"
                " return a ModelResponse, str, dict or pydantic object",
                model=model,
            )
    except ValidationError as exc:
        raise OutputValidationError(
            f"{model}: the double's answer is not a valid {_type_name(output_type)}:"
            f" {describe_validation_error(exc)}",
            model=model,
            last_response=reply,
        ) from exc
    return ModelResponse(output=output, model=model, stop_reason="end_turn", raw=_raw(output))


def _type_name(output_type: type[BaseModel] | None) -> str:
    return output_type.__name__ if output_type is not None else "text"


def _raw(output: Any) -> Any:
    return output.model_dump(mode="json") if isinstance(output, BaseModel) else output


def report_call(
    request: ModelRequest,
    model: str,
    attempt: int,
    started: float,
    response: ModelResponse | None,
    error: BaseException | None,
    *,
    first_token_ms: float | None = None,
    response_body: Any = None,
) -> None:
    """Report one double call as an attempt, as the real adapters do per HTTP request."""
    report_attempt(
        AttemptEvent(
            expert=request.expert,
            model=model,
            attempt=attempt,
            latency_ms=(time.perf_counter() - started) * 1000,
            request_body=request_body(request),
            response_body=response.raw if response is not None else response_body,
            usage=response.usage if response is not None else ModelResponse(output="").usage,
            stop_reason=response.stop_reason if response is not None else None,
            error=f"{type(error).__name__}: {error}" if error is not None else None,
            metadata=request.metadata,
            first_token_ms=first_token_ms,
        )
    )


def text_chunks(text: str, size: int = DEFAULT_CHUNK_CHARS) -> Iterator[str]:
    """`text` in pieces of about `size` characters, cut after whitespace; joined, exactly `text`."""
    piece = ""
    for match in re.finditer(r"\S+\s*|\s+", text):
        piece += match.group()
        if len(piece) >= size:
            yield piece
            piece = ""
    if piece:
        yield piece


async def stream_reply(
    request: ModelRequest,
    model: str,
    started: float,
    reply: ModelResponse | StreamCut,
    *,
    chunk_chars: int = DEFAULT_CHUNK_CHARS,
) -> AsyncIterator[StreamEvent]:
    """A double's answer as a stream: text deltas, then `StreamDone` (or the cut's error)."""
    text = reply.text if isinstance(reply, StreamCut) else reply.output
    if not isinstance(text, str):  # structured output is never shown partially
        assert isinstance(reply, ModelResponse)
        report_call(request, model, 1, started, reply, None)
        yield StreamDone(response=reply)
        return
    first_ms: float | None = None
    for piece in text_chunks(text, chunk_chars):
        if first_ms is None:
            first_ms = (time.perf_counter() - started) * 1000
        yield TextDelta(text=piece)
        await asyncio.sleep(0)  # let the consumer run between deltas, as over a network
    if isinstance(reply, StreamCut):
        error: ModelError = reply.error
        if text:
            error = StreamInterrupted(
                f"{model}: the stream failed after {len(text)} characters were handed on"
                f" ({type(reply.error).__name__}: {reply.error}); not retried silently",
                partial_text=text,
                cause=reply.error,
                model=model,
            )
        report_call(
            request,
            model,
            1,
            started,
            None,
            error,
            first_token_ms=first_ms,
            response_body={"partial_text": text},
        )
        raise error
    report_call(request, model, 1, started, reply, None, first_token_ms=first_ms)
    yield StreamDone(response=reply)


async def stream_answer(
    request: ModelRequest,
    model: str,
    reply_of: Callable[[], Awaitable[Any]],
    chunk_chars: int,
) -> AsyncIterator[StreamEvent]:
    """Stream what `reply_of()` answers (a `FunctionReply`), reporting the call once."""
    started = time.perf_counter()
    try:
        reply = await reply_of()
        if not isinstance(reply, StreamCut):
            reply = to_response(reply, request, model)
    except BaseException as exc:
        report_call(request, model, 1, started, None, exc)
        raise
    async for event in stream_reply(request, model, started, reply, chunk_chars=chunk_chars):
        yield event


async def call_reply(fn: ModelFunction, request: ModelRequest) -> Any:
    """Call `fn(request)`, awaiting it when it is async."""
    reply = fn(request)
    if inspect.isawaitable(reply):
        reply = await reply
    return reply


class FunctionModel:
    """A model whose answers come from `fn(request)`.

    Args:
        fn: `fn(request: ModelRequest) -> ModelResponse | str | dict | BaseModel | StreamCut`,
            sync or async; may raise (e.g. `ProviderOverloaded`) to simulate a provider error.
        name: The model's name in responses and attempt events.
        chunk_chars: About how many characters each streamed text delta holds.
    """

    def __init__(
        self, fn: ModelFunction, *, name: str = "function", chunk_chars: int = DEFAULT_CHUNK_CHARS
    ) -> None:
        self._fn = fn
        self._name = name
        self.chunk_chars = chunk_chars
        self.calls: list[ModelRequest] = []

    @property
    def name(self) -> str:
        """The name given at construction (`function` by default)."""
        return self._name

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer `request` with `fn(request)`, validated like a provider's answer."""
        self.calls.append(request)
        started = time.perf_counter()
        try:
            response = to_response(await call_reply(self._fn, request), request, self._name)
        except BaseException as exc:
            report_call(request, self._name, 1, started, None, exc)
            raise
        report_call(request, self._name, 1, started, response, None)
        return response

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream `fn(request)`'s text in chunks of whole words, then the response."""
        self.calls.append(request)
        return stream_answer(
            request, self._name, lambda: call_reply(self._fn, request), self.chunk_chars
        )
