"""The seam between the experts and any language model: one request type, one response type.

Real adapters (`AnthropicModel`, `OpenAIModel`), the `offline` stand-in and the test doubles
(`FunctionModel`, `ScriptedModel`) all receive exactly the same `ModelRequest`, so a test
that inspects it sees what a real provider would be sent.

Every HTTP attempt a model makes is reported to the attempt observer in force (a context
variable set by the orchestrator around each expert call); the audit log is built from
those reports, so retries and their cost are visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import dataclasses
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict, runtime_checkable

from pydantic import BaseModel

from frontdesk.errors import ModelRequestsBlocked
from frontdesk.frozen import quick_init
from frontdesk.knowledge import Passage
from frontdesk.redaction import schema_without_rules

Role = Literal["user", "assistant"]


class Message(TypedDict):
    """One turn of the user thread as sent to a model: only `user` and `assistant` roles."""

    role: Role
    content: str


@dataclass(frozen=True, kw_only=True)
class ModelSettings:
    """Per-call settings; explicit so the audit log can record them."""

    max_tokens: int = 1024
    """Upper bound on the answer's tokens."""
    temperature: float | None = None
    """Sampling temperature; `None` leaves the provider's default."""
    timeout: float = 60.0
    """Seconds for one HTTP attempt (never the SDKs' 10-minute default)."""
    output: Output | None = None
    """How structured output is asked for: `json_schema` (`response_format` with the
    schema), `json_object` (`response_format: json_object`, the schema in the prompt),
    `tools` (one forced tool call) or `prompt` (the schema in the prompt, the answer's JSON
    found by a tolerant parser); `None`: what the provider supports (OpenAI `json_schema`,
    Anthropic `tools`)."""
    context_tokens: int | None = None
    """The model's context window in tokens: every expert's budget is cut to fit it
    (docs/providers.md, "Fitting a small window"); `None`: the default budgets."""
    instruction: InstructionPlace | None = None
    """Where the response expert's instruction goes: `user` (a labelled block after the
    latest user message, the default), `system` (a system message after the thread) or
    `assistant` (a trailing assistant message, which servers that prefill continue: only
    for a model known not to)."""
    concurrency: int | None = None
    """How many requests the server answers at once; `1` turns speculation off (the
    request expert is not run beside triage on a server that would queue it)."""

    def over(self, base: ModelSettings) -> ModelSettings:
        """These settings over `base` (a model spec's): every field left at its default
        here takes `base`'s value."""
        changes = {
            f.name: getattr(base, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) == f.default and getattr(base, f.name) != f.default
        }
        return dataclasses.replace(self, **changes) if changes else self

    def recorded(self) -> dict[str, Any]:
        """The settings as the audit log records them (the fields left unset omitted)."""
        return dict(self._recorded)

    @functools.cached_property
    def _recorded(self) -> dict[str, Any]:
        """`recorded()`, worked out once: every model attempt of every turn records it."""
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) is not None or f.name in _ALWAYS_RECORDED
        }


_ALWAYS_RECORDED = ("max_tokens", "temperature", "timeout")

Output = Literal["json_schema", "json_object", "tools", "prompt"]
"""How a model is asked for structured output (`ModelSettings.output`)."""
OUTPUTS: tuple[Output, ...] = ("json_schema", "json_object", "tools", "prompt")
InstructionPlace = Literal["system", "user", "assistant"]
"""Where the response expert's instruction goes (`ModelSettings.instruction`)."""
INSTRUCTION_PLACES: tuple[InstructionPlace, ...] = ("system", "user", "assistant")


def settings_of(model: Model) -> ModelSettings:
    """The settings a model's spec gave it (`openai:NAME@URL?output=...`), looking through
    the wrappers (`CalibratedModel`, `FallbackModel`: its first model); default settings
    for a model that has none."""
    seen = 0
    current: Any = model
    while seen < 8:
        seen += 1
        options = getattr(current, "options", None)
        if isinstance(options, ModelSettings):
            return options
        inner = getattr(current, "inner", None)
        if inner is None:
            models = getattr(current, "models", None)
            inner = models[0] if isinstance(models, tuple) and models else None
        if inner is None:
            break
        current = inner
    return ModelSettings()


@dataclass(frozen=True, kw_only=True)
class PromptRef:
    """Which versioned system prompt a request carries, for the audit log."""

    name: str
    """The prompt file's name, e.g. `triage`."""
    version: str
    """The version from the prompt's front matter."""
    sha256: str
    """The hash of the rendered system text that was sent."""


class Speculation:
    """Rides on a speculative call's `ModelRequest`: the request expert's call started beside
    triage, whose answer is used only if triage agrees (`keep`) and otherwise thrown away
    (`discard`).

    A model keeping state per call registers `on_discard` to give back what a thrown-away
    call took: a `ScriptedModel` puts the step back, so the extraction made after triage
    gets the answer the script meant for it.
    """

    def __init__(self) -> None:
        self.state: Literal["pending", "kept", "discarded"] = "pending"
        self._undo: list[Callable[[], None]] = []

    def on_discard(self, undo: Callable[[], None]) -> None:
        """Call `undo` if the call is discarded (at once, if it was already)."""
        if self.state == "discarded":
            undo()
        elif self.state == "pending":
            self._undo.append(undo)

    def keep(self) -> None:
        """The answer is used: nothing is undone."""
        if self.state == "pending":
            self.state = "kept"
            self._undo.clear()

    def discard(self) -> None:
        """The answer is not used: undo what the call took, newest first."""
        if self.state != "pending":
            return
        self.state = "discarded"
        undo, self._undo = self._undo, []
        for fn in reversed(undo):
            fn()


@quick_init
@dataclass(frozen=True, kw_only=True)
class ModelRequest:
    """Everything one expert call sends to a model."""

    expert: str
    """Which expert is asking: `triage`, `request`, `response` or `summariser`."""
    system: str
    """The expert's system prompt, already rendered."""
    messages: Sequence[Message]
    """The user thread (summary included, as its first user turn) and, for the response
    expert only, one trailing assistant message holding the handler's instruction."""
    output_type: type[BaseModel] | None = None
    """The pydantic type to return, or `None` for text."""
    settings: ModelSettings = field(default_factory=ModelSettings)
    """Token, temperature and timeout settings for this call."""
    prompt: PromptRef | None = None
    """The versioned prompt behind `system`, recorded by the audit log."""
    cache_prefix_messages: int = 0
    """How many leading messages are stable between compactions; adapters that support
    prompt caching mark the end of this prefix (and the system prompt) as cacheable."""
    metadata: Mapping[str, str] = field(default_factory=dict)
    """Correlation ids (conversation, turn); never sent to a provider."""
    memory: str = ""
    """What is remembered about the user, as the delimited blocks already at the start of
    the last user turn (`experts._call.with_memory`): here for the audit log and test
    doubles, never sent apart (and never as system text); empty when nothing is. See
    docs/memory.md."""
    memory_ids: tuple[str, ...] = ()
    """The ids of the facts in `memory`, recorded by the audit log."""
    passages: tuple[Passage, ...] = ()
    """The passages of the business's documents this request carries, already in its last
    user turn (after the question, headed by `frontdesk.labels.DOCUMENTS_LABEL`): here for
    the audit log (id, version, hash) and `Reply.sources`. See docs/knowledge.md."""
    speculation: Speculation | None = field(default=None, compare=False)
    """Set on a speculative call (the request expert's, started beside triage, whose
    answer may be thrown away); never sent to a provider."""


@quick_init
@dataclass(frozen=True, kw_only=True)
class Usage:
    """Token usage of one call, as the provider reported it."""

    input_tokens: int = 0
    """Uncached input tokens."""
    output_tokens: int = 0
    """Output tokens."""
    cache_read_tokens: int = 0
    """Input tokens served from the provider's prompt cache."""
    cache_write_tokens: int = 0
    """Input tokens written to the provider's prompt cache."""

    @property
    def total_input_tokens(self) -> int:
        """All input tokens, cached or not."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


@quick_init
@dataclass(frozen=True, kw_only=True)
class ModelResponse:
    """What a model returned for one `ModelRequest`."""

    output: Any
    """The text (`str`) or an instance of the request's `output_type`."""
    usage: Usage = field(default_factory=Usage)
    """Token usage summed over the attempts that produced this response."""
    model: str = ""
    """The model spec that answered, e.g. `anthropic:claude-sonnet-4-5`."""
    stop_reason: str | None = None
    """The provider's stop reason (`end_turn`, `stop`, `tool_use`, ...)."""
    provider_request_id: str | None = None
    """The provider's request id of the successful attempt."""
    raw: Any = None
    """The raw response body (JSON-able), for the audit log."""
    attempts: int = 1
    """HTTP attempts spent, retries and validation re-asks included."""


@quick_init
@dataclass(frozen=True, kw_only=True)
class AttemptEvent:
    """One HTTP attempt (or one double's call), reported to the attempt observer."""

    expert: str
    model: str
    attempt: int
    """1-based attempt number within the expert call."""
    latency_ms: float
    request_body: Any
    """The exact payload sent (JSON-able)."""
    response_body: Any = None
    """The raw response body or error body (JSON-able)."""
    usage: Usage = field(default_factory=Usage)
    status_code: int | None = None
    provider_request_id: str | None = None
    stop_reason: str | None = None
    error: str | None = None
    """`ErrorClass: message` when the attempt failed, else `None`."""
    will_retry: bool = False
    metadata: Mapping[str, str] = field(default_factory=dict)
    first_token_ms: float | None = None
    """Milliseconds from sending to the first text delta, for a streamed attempt that got one
    (`latency_ms` is then the whole stream's time and `response_body` holds the full text)."""


def plain_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """`messages` as JSON-able dicts in a list of their own, those that are plain dicts
    already as they are (no one changes a request's messages once it is built): a thread
    of plain dicts, the usual one, is checked and copied in C."""
    if _DICT_ONLY.issuperset(map(type, messages)):
        return list(messages)  # type: ignore[arg-type]
    return [m if type(m) is dict else dict(m) for m in messages]  # type: ignore[misc]


_DICT_ONLY = frozenset((dict,))


AttemptObserver = Callable[[AttemptEvent], None]

_observer: contextvars.ContextVar[AttemptObserver | None] = contextvars.ContextVar(
    "frontdesk_attempt_observer", default=None
)


def observe_attempts(observer: AttemptObserver) -> contextlib.AbstractContextManager[None]:
    """Send every attempt made inside this block (in this task) to `observer`."""
    return _Observing(observer)


class _Observing:
    """`observe_attempts`' block (a plain object: every turn opens two, a generator-based
    context manager costs several times more)."""

    __slots__ = ("_observer", "_token")

    def __init__(self, observer: AttemptObserver) -> None:
        self._observer = observer
        self._token: contextvars.Token[AttemptObserver | None] | None = None

    def __enter__(self) -> None:
        self._token = _observer.set(self._observer)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _observer.reset(self._token)
            self._token = None


def report_attempt(event: AttemptEvent) -> None:
    """Report one attempt to the observer in force, if any. Models call this."""
    observer = _observer.get()
    if observer is not None:
        observer(event)


@runtime_checkable
class Model(Protocol):
    """Anything that can answer a `ModelRequest`."""

    @property
    def name(self) -> str:
        """The spec that names this model, e.g. `anthropic:claude-sonnet-4-5` or `offline`."""
        ...

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer one request; raise a `frontdesk.errors.ModelError` on failure."""
        ...


@dataclass(frozen=True, kw_only=True)
class TextDelta:
    """A piece of the answer's text, as the provider streamed it."""

    type: Literal["delta"] = "delta"
    text: str


@dataclass(frozen=True, kw_only=True)
class StreamDone:
    """The last event of a stream: the same `ModelResponse` that `request` would return."""

    type: Literal["done"] = "done"
    response: ModelResponse


StreamEvent = TextDelta | StreamDone
"""What `stream(request)` yields: `TextDelta`s, then exactly one `StreamDone`."""

OnDelta = Callable[[str], Awaitable[None]]
"""Awaited with each text delta as it arrives (before the next one is read)."""


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A `Model` that can also stream its text answer (an optional part of the seam)."""

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Yield the answer's text deltas, then one `StreamDone`.

        A failure before the first delta is retried like `request`; after it the stream
        raises `StreamInterrupted` (partial text was shown, nothing is retried silently).
        Raises `NotImplementedError` naming the class when the model cannot stream.
        """
        ...


def stream_of(model: Model, request: ModelRequest) -> AsyncIterator[StreamEvent]:
    """`model.stream(request)`, or `NotImplementedError` naming the class that cannot stream."""
    method = getattr(model, "stream", None)
    if method is None:
        raise NotImplementedError(f"streaming is not supported by {type(model).__name__}")
    events: AsyncIterator[StreamEvent] = method(request)
    return events


async def request_streaming(
    model: Model, request: ModelRequest, on_delta: OnDelta | None
) -> ModelResponse:
    """Answer `request`, handing each text delta to `on_delta` as it arrives.

    Without `on_delta`, or with a model that cannot stream, this is `model.request` (a
    non-streaming model's whole text is then handed over as one delta).
    """
    if on_delta is None:
        return await model.request(request)
    final: ModelResponse | None = None
    started = False
    events: AsyncIterator[StreamEvent] | None = None
    try:
        events = stream_of(model, request)
        async for event in events:
            started = True
            if isinstance(event, TextDelta):
                await on_delta(event.text)
            else:
                final = event.response
    except NotImplementedError:
        if started:
            raise
        response = await model.request(request)
        if isinstance(response.output, str) and response.output:
            await on_delta(response.output)
        return response
    finally:
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()
    if final is None:
        raise RuntimeError(f"{model.name}: the stream ended without its final response")
    return final


async def events_from_callback(
    run: Callable[[OnDelta], Awaitable[ModelResponse]],
) -> AsyncIterator[StreamEvent]:
    """Turn `run(on_delta) -> ModelResponse` into the `stream` iterator.

    `run` works in a task; each delta waits until the consumer has taken the previous one
    (so a slow reader slows the provider read, never an unbounded buffer). A consumer that
    stops early (`aclose`, or dropping the iterator) cancels the task, which closes the
    provider's connection.
    """
    queue: asyncio.Queue[StreamEvent | BaseException] = asyncio.Queue(maxsize=1)

    async def on_delta(text: str) -> None:
        await queue.put(TextDelta(text=text))

    async def produce() -> None:
        try:
            response = await run(on_delta)
        except Exception as exc:  # handed to the consumer, raised there
            await queue.put(exc)
            return
        await queue.put(StreamDone(response=response))

    task = asyncio.create_task(produce())
    try:
        while True:
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item
            yield item
            if isinstance(item, StreamDone):
                return
    finally:
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


ALLOW_MODEL_REQUESTS = True
"""Global switch: the test suite sets it to `False` so no real provider is ever called."""


def check_allow_model_requests() -> None:
    """Raise when real provider calls are switched off (every real adapter calls this first).

    Raises:
        ModelRequestsBlocked: if `ALLOW_MODEL_REQUESTS` is `False`.
    """
    if not ALLOW_MODEL_REQUESTS:
        raise ModelRequestsBlocked(
            "real model requests are switched off (experts.providers.base.ALLOW_MODEL_REQUESTS"
            " is False); use FunctionModel, ScriptedModel or model='offline' in tests, or"
            " point the SDK at a local server and allow requests in that test"
        )


def json_schema_of(output_type: type[BaseModel], *, union: bool = True) -> dict[str, Any]:
    """The JSON schema a provider is asked to fill for `output_type` (without the redaction
    rules a field may carry in `json_schema_extra`: they are for the views, not the model).

    A type with a `wire_json_schema()` (the request expert's: a tagged union on `kind`) is
    sent as that, so that a server's grammar enforces the choice; `union=False` keeps the
    flat form (a tool's `input_schema` must be one object). Made once per type: each call
    gets its own copy (a caller may change it)."""
    return copy.deepcopy(_json_schema(output_type, union))


@functools.lru_cache(maxsize=512)
def _json_schema(output_type: type[BaseModel], union: bool) -> dict[str, Any]:
    wire = getattr(output_type, "wire_json_schema", None)
    raw = wire() if union and callable(wire) else output_type.model_json_schema()
    schema: dict[str, Any] = schema_without_rules(raw)
    return schema
