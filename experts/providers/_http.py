"""What both real adapters share: error classification, header parsing, the re-ask loop.

An adapter (`AnthropicModel`, `OpenAIModel`) only builds its wire payload, makes one SDK call
and parses the answer; `HTTPModel.request` runs those attempts under the retry policy and
asks once more when the structured output fails validation.
"""

from __future__ import annotations

import dataclasses
import email.utils
import json
import random
import re
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

import httpx
import httpx2
from pydantic import BaseModel, ValidationError

from frontdesk.errors import (
    ModelAPIError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    OutputValidationError,
    ProviderOverloaded,
    ProviderQuotaExhausted,
    RateLimited,
    StreamInterrupted,
    TruncatedOutput,
    UnsupportedOutput,
)
from frontdesk.experts.providers._retry import (
    AttemptFailure,
    AttemptRecord,
    AttemptSuccess,
    Clock,
    RetryConfig,
    RetryRunner,
    Sleep,
)
from frontdesk.experts.providers.base import (
    ModelRequest,
    ModelResponse,
    ModelSettings,
    OnDelta,
    StreamEvent,
    check_allow_model_requests,
    events_from_callback,
)
from frontdesk.masking import scrub

_QUOTA_MARKERS = (
    "insufficient_quota",
    "spend_limit",
    "billing",
    "credit_balance",
    "credit balance",
    "quota_exceeded",
)
_FORM_MARKERS = {
    "json_schema": ("json_schema", "response_format", "schema", "grammar"),
    "json_object": ("json_object", "response_format", "grammar"),
    "tools": ("tool", "function"),
}
"""Words in an error message that say the structured-output form itself was refused."""
_ERROR_TYPE_STATUS = {
    "overloaded_error": 529,
    "rate_limit_error": 429,
    "api_error": 500,
    "server_error": 500,
    "timeout_error": 408,
}


@dataclass(kw_only=True)
class Answer:
    """A parsed, validated answer of one attempt."""

    output: Any
    record: AttemptRecord


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds or HTTP date), else `None`."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        ms = float(lowered["retry-after-ms"])
        if ms >= 0 and ms == ms and ms != float("inf"):
            return ms / 1000
    except (KeyError, ValueError):
        pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
        if seconds >= 0 and seconds == seconds and seconds != float("inf"):
            return seconds
        return None
    except ValueError:
        pass
    try:
        parsed = email.utils.parsedate_tz(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed is None:
        return None
    return max(0.0, email.utils.mktime_tz(parsed) - time.time())


def redact(value: Any, secret: str | None) -> Any:
    """`value` with every occurrence of `secret` (and its long fragments) masked, and any
    other key, bearer token or URL password in it too (`frontdesk.masking.scrub`)."""
    if isinstance(value, str):
        out = scrub(value)
        if not secret or len(secret) < 8:
            return out
        out = out.replace(secret, "***")
        # Providers echo keys partly ("sk-abc...wxyz"); mask any 8+ character piece of the key.
        for size in (12, 8):
            for i in range(0, len(secret) - size + 1):
                piece = secret[i : i + size]
                if piece in out:
                    out = out.replace(piece, "***")
        return out
    if isinstance(value, Mapping):
        return {k: redact(v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, secret) for v in value]
    return value


def _error_fields(body: Any) -> tuple[str, str, str]:
    """`(type, code, message)` from an Anthropic- or OpenAI-shaped error body."""
    error = body.get("error") if isinstance(body, Mapping) else None
    if not isinstance(error, Mapping):
        return "", "", str(body)[:300] if body else ""
    details = error.get("details")
    code = error.get("code") or (details.get("error_code") if isinstance(details, Mapping) else "")
    return str(error.get("type") or ""), str(code or ""), str(error.get("message") or "")


def http_failure(
    status: int,
    headers: Mapping[str, str],
    body: Any,
    record: AttemptRecord,
    *,
    provider: str,
    key_env: str,
    secret: str | None,
    request_id_header: str,
) -> AttemptFailure:
    """Classify one error answer (an HTTP error, or an error body inside a 200)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    body = redact(body, secret)
    record.status_code = status
    record.response_body = body
    record.provider_request_id = lowered.get(request_id_header)
    err_type, err_code, err_msg = _error_fields(body)
    effective = status if status != 200 else _ERROR_TYPE_STATUS.get(err_type, 400)
    retry_after = parse_retry_after(lowered)
    label = f"{provider} {status}" + (f" {err_type}" if err_type else "")
    common: dict[str, Any] = {"status_code": status, "body": body, "headers": lowered}
    marker_text = f"{err_type} {err_code} {err_msg}".lower()
    quota = effective == 402 or (effective == 429 and any(m in marker_text for m in _QUOTA_MARKERS))
    error: ModelError
    retryable = False
    if quota:
        error = ProviderQuotaExhausted(
            f"{label}: the account is out of credit or over its spend limit"
            f" ({err_code or err_type or 'quota'}); add credit or raise the limit, or use"
            " another model",
            **common,
        )
    elif effective in (401, 403):
        error = ModelHTTPError(
            f"{label}: the provider rejected the credentials; check {key_env}", **common
        )
    elif effective == 429:
        error = RateLimited(
            f"{label}: rate limited" + (f": {err_msg}" if err_msg else ""),
            retry_after=retry_after,
            **common,
        )
        retryable = True
    elif effective >= 500 or err_type == "overloaded_error":
        error = ProviderOverloaded(
            f"{label}: the provider is overloaded or failing" + (f": {err_msg}" if err_msg else ""),
            **common,
        )
        retryable = True
    elif effective in (408, 409):
        error = ModelHTTPError(f"{label}: {err_msg or 'request timeout or conflict'}", **common)
        retryable = True
    elif effective == 404:
        error = ModelHTTPError(
            f"{label}: not found (is the model name right?): {err_msg}", **common
        )
    else:
        error = ModelHTTPError(f"{label}: the request was rejected: {err_msg}", **common)
    should_retry = lowered.get("x-should-retry")
    if should_retry == "false":
        retryable = False
    elif should_retry == "true" and not quota:
        retryable = True
    return AttemptFailure(error, record, retryable=retryable, retry_after=retry_after)


def connection_failure(
    record: AttemptRecord, *, provider: str, base_url: str, timed_out: bool
) -> AttemptFailure:
    """An attempt that never got an HTTP answer (refused, reset, timed out)."""
    what = "timed out" if timed_out else "could not connect"
    error = ModelConnectionError(
        f"{provider}: {what} to {base_url}; check the base URL and that the server is"
        " running (or raise ModelSettings.timeout)"
    )
    return AttemptFailure(error, record, retryable=True)


def invalid_output(record: AttemptRecord, problem: str, cause: Exception | None) -> AttemptFailure:
    """An answer that does not validate: the adapter asks once more, showing `problem`."""
    error = OutputValidationError(
        f"the model's answer did not validate: {problem}", last_response=record.response_body
    )
    error.__cause__ = cause
    return AttemptFailure(error, record, invalid_output=True)


def describe_validation_error(exc: ValidationError) -> str:
    """A short, model-readable list of what is wrong with a structured answer."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def validate_output(output_type: type[BaseModel], data: Any, record: AttemptRecord) -> BaseModel:
    """Validate `data` (a dict, or JSON text) into `output_type`, or raise `AttemptFailure`."""
    try:
        if isinstance(data, str):
            return output_type.model_validate_json(strip_code_fence(data))
        return output_type.model_validate(data)
    except ValidationError as exc:
        raise invalid_output(record, describe_validation_error(exc), exc) from exc


def strip_code_fence(text: str) -> str:
    """JSON inside a Markdown code fence (some OpenAI-compatible servers add one)."""
    match = re.fullmatch(r"\s*```(?:json)?\s*(.*?)\s*```\s*", text, flags=re.DOTALL)
    return match.group(1) if match else text


def schema_name(output_type: type[BaseModel]) -> str:
    """A tool / schema name the providers accept (`^[a-zA-Z0-9_-]{1,64}$`)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", output_type.__name__)[:64] or "output"


def to_jsonable(value: Any) -> Any:
    """`value` made JSON-able for the audit log (unknown objects become strings)."""
    return json.loads(json.dumps(value, default=str))


class SDKErrorSummary(Exception):
    """The `__cause__` of a translated SDK error: its class and scrubbed message only."""


class _StatusError(Protocol):
    """What both SDKs' HTTP status errors carry."""

    status_code: int
    response: httpx.Response
    body: object


@dataclass(frozen=True)
class SDKErrors:
    """One SDK's exception classes, for translating them at the adapter boundary."""

    status: type[Exception]
    """An HTTP error status (has `status_code`, `response`, `body`)."""
    connection: type[Exception]
    """The host could not be reached or the connection dropped."""
    timeout: type[Exception]
    """The attempt timed out (a kind of `connection`)."""
    base: type[Exception]
    """Anything else the SDK raises."""


class HTTPModel(ABC):
    """Shared behaviour of the real adapters: retries, re-ask, the response."""

    provider: str = ""
    key_env: str = ""
    request_id_header: str = ""
    """The response header carrying the provider's request id."""
    server_error_type: str = "api_error"
    """The provider's error type for a server fault (used when a 200 body is not JSON)."""
    sdk_errors: SDKErrors
    _secret: str | None = None
    base_url: str = ""

    def __init__(
        self,
        *,
        retry: RetryConfig | None,
        sleep: Sleep | None,
        clock: Clock | None,
        rng: random.Random | None,
        options: ModelSettings | None = None,
    ) -> None:
        self.options = options or ModelSettings()
        """The settings the model spec gave (`?output=...&context_tokens=...`): a request's
        own settings left at their defaults take these (`ModelSettings.over`)."""
        self.retry_config = retry or RetryConfig()
        self._sleep = sleep
        self._clock = clock
        self._rng = rng

    @property
    @abstractmethod
    def name(self) -> str:
        """The spec that names this model."""

    @abstractmethod
    async def aclose(self) -> None:
        """Close the SDK client's connections (call once the model is no longer needed)."""

    async def __aenter__(self) -> HTTPModel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @abstractmethod
    async def _attempt(
        self, request: ModelRequest, reask: list[dict[str, Any]], seconds: float
    ) -> AttemptSuccess[Answer]:
        """One HTTP attempt: send, then parse and validate, or raise `AttemptFailure`."""

    def _status_failure(
        self, status: int, headers: dict[str, str], body: Any, record: AttemptRecord
    ) -> AttemptFailure:
        """An error status (or an error inside a 200) as a typed, classified failure; one
        that says the structured-output form is not supported is `UnsupportedOutput`."""
        failure = http_failure(
            status,
            headers,
            body,
            record,
            provider=self.provider,
            key_env=self.key_env,
            secret=self._secret,
            request_id_header=self.request_id_header,
        )
        form = self.output_form(record.request_body)
        error = failure.error
        if (
            form is None
            or not isinstance(error, ModelHTTPError)
            or error.status_code
            in (
                401,
                403,
                404,
                408,
                409,
                429,
            )
        ):
            return failure
        _, _, message = _error_fields(record.response_body)
        text = f"{message} {record.response_body}".lower()
        if not any(marker in text for marker in _FORM_MARKERS[form]):
            return failure
        others = " or ".join(f"output={o}" for o in self.other_outputs(form))
        unsupported = UnsupportedOutput(
            f"{self.provider} {error.status_code}: the server does not give structured output"
            f" as {form} ({message or 'no message'}); set {others} in the model spec, e.g."
            f" '{self.name}?output={self.other_outputs(form)[0]}' (docs/providers.md,"
            ' "Self-hosted models")',
            status_code=error.status_code,
            body=error.body,
            headers=error.headers,
        )
        return AttemptFailure(unsupported, record, retryable=False)

    def output_form(self, request_body: Any) -> str | None:
        """The structured-output form a request body asked for (`None`: plain text)."""
        return None

    def other_outputs(self, form: str) -> tuple[str, ...]:
        """The `output=` values to suggest instead of `form`."""
        return ("prompt",)

    def settled(self, request: ModelRequest) -> ModelRequest:
        """`request` with the spec's settings under its own (`ModelSettings.over`)."""
        settings = request.settings.over(self.options)
        if settings is request.settings:
            return request
        return dataclasses.replace(request, settings=settings)

    def _translated(
        self, exc: Exception, record: AttemptRecord, headers: dict[str, str]
    ) -> AttemptFailure:
        """The SDK's exception (or a body that is not JSON) as our typed failure."""
        errors = self.sdk_errors
        if isinstance(exc, errors.status):
            status = cast(_StatusError, exc)
            failure = self._status_failure(
                status.status_code, dict(status.response.headers), status.body, record
            )
        elif isinstance(exc, errors.connection | httpx2.TransportError):
            # A stream read fails with the transport's own error (dropped mid-body, stalled).
            failure = connection_failure(
                record,
                provider=self.provider,
                base_url=self.base_url,
                timed_out=isinstance(exc, errors.timeout | httpx2.TimeoutException),
            )
        elif isinstance(exc, errors.base) and _is_error_body(getattr(exc, "body", None)):
            # An error sent inside a 200 stream (OpenAI's `data: {"error": ...}` chunk):
            # classified by its type, as an error body inside a 200 is.
            body = {"error": getattr(exc, "body", None)}
            failure = self._status_failure(200, headers, body, record)
        elif isinstance(exc, errors.base):
            text = redact(f"{self.provider}: {type(exc).__name__}: {exc}", self._secret)
            failure = AttemptFailure(ModelAPIError(text), record)
        else:  # The SDK returned a 200 whose body is not JSON.
            body = {"error": {"type": self.server_error_type, "message": "body is not JSON"}}
            failure = self._status_failure(200, headers, body, record)
        # The SDK's exception holds the raw body and request (an echoed key, the auth
        # header), so it is never chained: a scrubbed summary stands in for it.
        failure.error.__cause__ = SDKErrorSummary(
            redact(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}", self._secret)
        )
        failure.error.__suppress_context__ = True
        return failure

    @abstractmethod
    def _reask_turns(self, failure: AttemptFailure) -> list[dict[str, Any]]:
        """Wire messages that show the model its invalid answer and the problem."""

    @abstractmethod
    def stream_payload(self, request: ModelRequest, reask: list[dict[str, Any]]) -> dict[str, Any]:
        """The streaming request body for `request` (plus re-ask turns), exactly as sent."""

    @abstractmethod
    async def _stream_attempt(
        self,
        request: ModelRequest,
        payload: dict[str, Any],
        record: AttemptRecord,
        seconds: float,
        on_delta: OnDelta,
    ) -> AttemptSuccess[Answer]:
        """One streamed HTTP attempt: hand each text delta on, then parse the whole answer."""

    def _ended_early(self, record: AttemptRecord, body: Any, missing: str) -> AttemptFailure:
        """A stream that closed before its end marker (`missing`): a cut connection, with
        what had arrived kept on the record."""
        record.response_body = body
        failure = connection_failure(
            record, provider=self.provider, base_url=self.base_url, timed_out=False
        )
        failure.error.args = (f"{failure.error} (the stream ended before {missing})",)
        return failure

    async def _next_event(
        self, events: AsyncIterator[Any], record: AttemptRecord, headers: dict[str, str]
    ) -> Any:
        """The stream's next SDK event, `None` at its end; SDK and transport errors typed."""
        try:
            return await events.__anext__()
        except StopAsyncIteration:
            return None
        except (self.sdk_errors.base, httpx2.HTTPError, ValueError) as exc:
            raise self._translated(exc, record, headers) from None

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Stream the text answer: deltas as the provider sends them, then the response.

        A failure before the first delta is retried under the retry policy, like `request`;
        after it, `StreamInterrupted` (with the text shown so far) ends the stream. A
        structured request is never shown partially: it yields only its final response.
        """
        return events_from_callback(lambda on_delta: self.request_streaming(request, on_delta))

    async def request_streaming(self, request: ModelRequest, on_delta: OnDelta) -> ModelResponse:
        """`request`, streamed: `on_delta` is awaited with each text delta as it arrives."""
        request = self.settled(request)
        if request.output_type is not None:
            return await self.request(request)
        runner = self._runner(request)

        def attempt(
            current: ModelRequest, reask: list[dict[str, Any]], seconds: float
        ) -> Awaitable[AttemptSuccess[Answer]]:
            return self._guarded_stream_attempt(runner, current, reask, seconds, on_delta)

        return await self._call(request, attempt, runner)

    async def _guarded_stream_attempt(
        self,
        runner: RetryRunner,
        request: ModelRequest,
        reask: list[dict[str, Any]],
        seconds: float,
        on_delta: OnDelta,
    ) -> AttemptSuccess[Answer]:
        """A streamed attempt whose failure after the first delta is never retried."""
        started = time.perf_counter()
        payload = self.stream_payload(request, reask)
        record = AttemptRecord(request_body=to_jsonable(payload))
        runner.in_flight = record
        shown: list[str] = []

        async def forward(text: str) -> None:
            if not text:
                return
            if record.first_token_ms is None:
                record.first_token_ms = (time.perf_counter() - started) * 1000
            shown.append(text)
            await on_delta(text)

        try:
            return await self._stream_attempt(request, payload, record, seconds, forward)
        except AttemptFailure as failure:
            if not shown:
                raise
            partial = "".join(shown)
            error = StreamInterrupted(
                f"{self.provider}: the stream failed after {len(partial)} characters of the"
                f" answer were already handed on ({type(failure.error).__name__}:"
                f" {failure.error}); it is not retried silently: show a safe reply and retry"
                " the turn",
                partial_text=partial,
                cause=failure.error,
                model=self.name,
            )
            error.__cause__ = failure.error
            raise AttemptFailure(error, failure.record) from failure

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Answer `request`, retrying under the policy; raises only `ModelError`s."""
        return await self._call(request, self._attempt, self._runner(request))

    def _runner(self, request: ModelRequest) -> RetryRunner:
        """The retry policy's runner for one expert call."""
        return RetryRunner(
            self.retry_config,
            expert=request.expert,
            model=self.name,
            metadata=request.metadata,
            sleep=self._sleep,
            clock=self._clock,
            rng=self._rng,
        )

    async def _call(
        self,
        request: ModelRequest,
        attempt: Callable[
            [ModelRequest, list[dict[str, Any]], float], Awaitable[AttemptSuccess[Answer]]
        ],
        runner: RetryRunner,
    ) -> ModelResponse:
        """Run `attempt` under the retry policy, with one re-ask or one roomier retry.

        The re-ask gets time of its own: the call's total budget grows by what the first
        answer took (twice that for the roomier retry, which may write twice as much), so a
        slow server's re-ask is not cut off by the budget the first answer used up."""
        check_allow_model_requests()
        reask: list[dict[str, Any]] = []
        current = self.settled(request)
        runner.at_least(current.settings.timeout)

        async def send(_number: int) -> AttemptSuccess[Answer]:
            return await attempt(current, reask, runner.attempt_timeout(current.settings.timeout))

        failed: ModelError | None = None
        try:
            try:
                answer = await runner.run(send)
            except AttemptFailure as failure:
                if runner.attempts_left <= 0:
                    raise
                if failure.invalid_output:
                    reask.extend(self._reask_turns(failure))
                    runner.extend(runner.elapsed)
                elif isinstance(failure.error, TruncatedOutput):
                    # Cut off by the token limit: once more with room to finish, never a loop.
                    current = _with_more_room(current)
                    runner.extend(2 * runner.elapsed)
                else:
                    raise
                answer = await runner.run(send)
        except AttemptFailure as failure:
            failed = failure.error
        if failed is not None:
            # Raised outside the handler, so no SDK exception rides along as `__context__`.
            failed.__context__ = None
            raise failed
        return ModelResponse(
            output=answer.output,
            usage=runner.usage,
            model=self.name,
            stop_reason=answer.record.stop_reason,
            provider_request_id=answer.record.provider_request_id,
            raw=answer.record.response_body,
            attempts=runner.attempts,
        )


def _is_error_body(body: Any) -> bool:
    """Whether `body` looks like a provider's error object (`type` or `code`, and `message`)."""
    return (
        isinstance(body, Mapping)
        and "message" in body
        and bool(body.get("type") or body.get("code"))
    )


def _with_more_room(request: ModelRequest) -> ModelRequest:
    """The same request with twice the answer's token limit (and twice the time for it)."""
    settings = dataclasses.replace(
        request.settings,
        max_tokens=request.settings.max_tokens * 2,
        timeout=request.settings.timeout * 2,
    )
    return dataclasses.replace(request, settings=settings)
