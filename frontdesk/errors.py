"""Every error frontdesk raises on purpose, in one tree (a leaf module every package imports).

    FrontdeskError                      anything frontdesk raises on purpose
    ├── UserError                       the caller did something to fix
    │   ├── ConfigError                 bad configuration: names the setting and what to do
    │   │   ├── UnknownModelSpec        a model spec frontdesk cannot parse
    │   │   ├── MissingAPIKey           the provider's key is not set
    │   │   ├── AuditConfigError        a database URL or setting the audit log cannot use
    │   │   │   └── AuditKeyError       master key missing, wrong, or not the data keys' one
    │   │   ├── PromptError             a prompt file is missing or malformed
    │   │   │   └── PromptVariableError a prompt rendered without a variable it uses
    │   │   ├── SchemaOutdated          the database schema is behind: `frontdesk db upgrade`
    │   │   ├── SchemaAhead             the database schema is newer than this code
    │   │   └── ConfigProblems          several problems found in one check (`serve --check`),
    │   │                               `problems` one line each with its fix
    │   ├── InvalidUserText             the text cannot be a user turn (nothing stored)
    │   │   ├── EmptyMessage            empty or whitespace-only
    │   │   ├── InputTooLarge           over `max_message_chars`, or over the question budget
    │   │   └── ForbiddenCharacters     NUL or other control characters, lone surrogates
    │   ├── InvalidInput                text or an id the store cannot keep on every backend
    │   ├── InvalidToken                a bearer token the service refuses (HTTP 401)
    │   ├── UserStateUnavailable        a handler used the user scope in a conversation with
    │   │                               no user id (single-user mode)
    │   ├── InvalidOutcome              an `Outcome` whose data cannot be stored as JSON
    │   ├── InvalidConversationFile     a `frontdesk test` YAML file not in the format
    │   ├── IdempotencyConflict         a client message id reused with different text (409)
    │   ├── ConversationNotFound        no such conversation for this user (404)
    │   ├── ProfileMismatch             a conversation named with another profile than its own
    │   ├── NotHandedOff                an operator call on a conversation no person has (409)
    │   ├── HandoffClaimed              another operator has claimed the conversation (409)
    │   ├── ConversationHandedOff       a bot-only call while a person has the conversation
    │   ├── MessageNotFound             no such message (or not in the named conversation)
    │   │   └── MessageNotInConversation
    │   ├── MemoryNotFound              no such memory for this user (404)
    │   ├── QuestionOverBudget          the new question alone is over its token allowance
    │   ├── AuditPayloadError           an event that cannot be stored as canonical JSON
    │   ├── UnknownConversation         no audit rows for the conversation asked for
    │   ├── ModelRequestsBlocked        a real provider call while they are switched off
    │   ├── UnexpectedModelCall         a ScriptedModel was called after its script ran out
    │   └── UnconsumedSteps             a ScriptedModel still holds steps at assert_complete()
    ├── TurnFailed                      a turn could not be answered; the user message is
    │   │                               stored, `safe_reply` is what to show, and a retry with
    │   │                               the same client_message_id finishes the turn
    │   └── HandlerFailed               a category handler raised, with
    │                                   `Orchestrator(handler_errors="raise")` (`__cause__`
    │                                   is the handler's exception)
    ├── ModelError                      a model call failed (provider errors translated here)
    │   ├── ModelAPIError               a non-retryable provider error
    │   │   └── ModelHTTPError          ... with an HTTP status (status_code, body, headers)
    │   │       ├── ProviderQuotaExhausted  money ran out (429 insufficient_quota)
    │   │       ├── RateLimited         429 still failing, or retry-after beyond the budget
    │   │       ├── ProviderOverloaded  529/5xx for the whole attempt budget
    │   │       └── UnsupportedOutput   the server refuses the structured-output form asked
    │   │                               for (also a ConfigError: set `output=` in the spec)
    │   ├── ModelConnectionError        unreachable host, connection reset, timeout
    │   ├── TruncatedOutput             stopped by max_tokens / length
    │   ├── Refusal                     the model refused
    │   ├── StreamInterrupted           a stream failed after text was shown (never retried)
    │   ├── OutputValidationError       structured output still invalid after re-asking
    │   └── EmptySummary                the summariser gave no usable text
    ├── StoreError                      an unexpected database failure
    │   ├── StoreUnavailable            transient (serialisation, deadlock, disconnect): retry
    │   ├── ConversationBusy            another turn holds the conversation: retry later
    │   └── LeaseLost                   a turn's lease was taken over (fenced): nothing of
    │                                   its last transaction landed; retry the same message
    └── AuditError                      the audit log failed at run time
        ├── AuditWriteError             a batch could not be written (and was not spooled)
        └── ReplayError                 a recorded turn could not be replayed
            └── ReplayAppMismatch       the log was recorded by another app (pass --app)

No `anthropic.*` or `openai.*` exception ever crosses the adapter boundary. The packages'
own `errors` modules re-export their part of this tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "SAFE_REPLY",
    "AuditConfigError",
    "AuditError",
    "AuditKeyError",
    "AuditPayloadError",
    "AuditWriteError",
    "ConfigError",
    "ConfigProblems",
    "ConversationBusy",
    "ConversationHandedOff",
    "ConversationNotFound",
    "EmptyMessage",
    "EmptySummary",
    "ForbiddenCharacters",
    "FrontdeskError",
    "HandlerFailed",
    "HandoffClaimed",
    "IdempotencyConflict",
    "InputTooLarge",
    "InvalidConversationFile",
    "InvalidInput",
    "InvalidOutcome",
    "InvalidToken",
    "InvalidUserText",
    "LeaseLost",
    "MemoryNotFound",
    "MessageNotFound",
    "MessageNotInConversation",
    "MissingAPIKey",
    "ModelAPIError",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelRequestsBlocked",
    "NotHandedOff",
    "OutputValidationError",
    "ProfileMismatch",
    "PromptError",
    "PromptVariableError",
    "ProviderOverloaded",
    "ProviderQuotaExhausted",
    "QuestionOverBudget",
    "RateLimited",
    "Refusal",
    "ReplayAppMismatch",
    "ReplayError",
    "SchemaAhead",
    "SchemaOutdated",
    "ServiceBusy",
    "SpendLimitReached",
    "StoreError",
    "StoreUnavailable",
    "StreamInterrupted",
    "TruncatedOutput",
    "TurnFailed",
    "UnconsumedSteps",
    "UnexpectedModelCall",
    "UnknownConversation",
    "UnknownModelSpec",
    "UnsupportedOutput",
    "UserError",
    "UserStateUnavailable",
]


class FrontdeskError(Exception):
    """Base class of every error frontdesk raises on purpose."""


class UserError(FrontdeskError):
    """A mistake by the caller; the message says what to change."""


class SpendLimitReached(FrontdeskError):
    """The user (or conversation) spent its `SpendLimit` over the window: no model is
    called for this turn (`Orchestrator(spend_limit=...)`; the service answers 429).

    The message is stored (with the failed turn's safe reply under it); send it again after
    `retry_after` seconds, when the oldest counted spend leaves the window."""

    def __init__(
        self,
        message: str,
        *,
        retry_after: float,
        tokens: int,
        cost_usd: float,
        user_id: str | None,
        conversation_id: str,
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds until the spend counted now starts to leave the window."""
        self.tokens = tokens
        """Tokens counted in the window."""
        self.cost_usd = cost_usd
        """Estimated USD counted in the window (list prices; unknown models count 0)."""
        self.user_id = user_id
        self.conversation_id = conversation_id


class ConfigError(UserError):
    """Configuration that cannot work (unknown model spec, missing key, bad budget, ...)."""


class ConfigProblems(ConfigError):
    """Every problem one check found (`frontdesk serve --check`), so that one run names them
    all rather than one per restart; `problems` holds one line each, with its fix."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


class ConversationNotFound(UserError):
    """No conversation with this id belongs to this user.

    Raised the same way for a conversation that does not exist and for one owned by another
    user, so that a caller cannot probe for other customers' conversations.
    """

    def __init__(
        self, message: str, *, conversation_id: str | None, message_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        """The conversation asked for (`None` when the caller named a message instead)."""
        self.message_id = message_id
        """The message asked for (edit, regenerate), when the caller named one."""


# --- Models and experts (experts) ---
class UnknownModelSpec(ConfigError):
    """A model spec that is not `anthropic:NAME`, `openai:NAME[@BASE_URL]`, `offline` or a Model."""


class MissingAPIKey(ConfigError):
    """A provider was asked for but its API key is not set."""


class ModelRequestsBlocked(UserError):
    """A real provider call was made while `ALLOW_MODEL_REQUESTS` is `False`."""


class UnexpectedModelCall(UserError, AssertionError):
    """A `ScriptedModel` was called more times than it has steps (a test expectation failed)."""

    def __init__(self, call: Any, call_index: int) -> None:
        expert = getattr(call, "expert", "?")
        super().__init__(
            f"ScriptedModel has no step left for call #{call_index} (expert {expert!r});"
            " add a step to the script or check why the code calls the model again"
        )
        self.call = call
        self.call_index = call_index


class UnconsumedSteps(UserError, AssertionError):
    """A `ScriptedModel` still holds steps when the test says the script is complete."""

    def __init__(self, remaining: list[Any]) -> None:
        super().__init__(
            f"ScriptedModel has {len(remaining)} unconsumed step(s); the code made fewer model"
            " calls than the script expects"
        )
        self.remaining = remaining


class ModelError(FrontdeskError):
    """A model call failed; `model` names the spec, `attempts` the HTTP attempts spent."""

    def __init__(self, message: str, *, model: str = "", attempts: int = 1) -> None:
        super().__init__(message)
        self.model = model
        self.attempts = attempts


class ModelAPIError(ModelError):
    """The provider answered with an error that retrying will not fix."""


class ModelHTTPError(ModelAPIError):
    """A provider error with an HTTP status; headers are lowercased."""

    def __init__(
        self,
        message: str,
        *,
        status_code: int,
        model: str = "",
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        attempts: int = 1,
    ) -> None:
        super().__init__(message, model=model, attempts=attempts)
        self.status_code = status_code
        self.body = body
        self.headers = {k.lower(): v for k, v in (headers or {}).items()}


class ProviderQuotaExhausted(ModelHTTPError):
    """The account is out of credit or over its spend limit: never retried."""


class RateLimited(ModelHTTPError):
    """Rate limited past the retry budget; `retry_after` is the provider's wait in seconds."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ProviderOverloaded(ModelHTTPError):
    """529 / 5xx on every attempt of the budget."""


class UnsupportedOutput(ModelHTTPError, ConfigError):
    """The server answered that it cannot give structured output in the form asked for
    (`response_format: json_schema`, `tools`, ...): a configuration to change (the model
    spec's `output=`), never retried and never reported as an outage."""


class ModelConnectionError(ModelError):
    """The provider could not be reached (connection refused or reset, timeout)."""


class TruncatedOutput(ModelError):
    """The answer was cut off by the token limit; never half-parsed."""


class Refusal(ModelError):
    """The model refused to answer."""


class StreamInterrupted(ModelError):
    """A streamed answer failed after its first text delta was handed on.

    It is never retried silently: the consumer has shown `partial_text` already. `cause` is
    the underlying failure (a dropped connection, a timeout, a refusal, a truncation).
    """

    def __init__(
        self, message: str, *, partial_text: str, cause: ModelError, **kwargs: Any
    ) -> None:
        super().__init__(message, **kwargs)
        self.partial_text = partial_text
        self.cause = cause


class OutputValidationError(ModelError):
    """Structured output failed validation even after re-asking with the error shown."""

    def __init__(self, message: str, *, last_response: Any = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.last_response = last_response


# --- The conversation store (threads) ---
class InvalidInput(UserError):
    """Text or an id that cannot be stored identically on SQLite and PostgreSQL (NUL, bad UTF-8)."""


class UserStateUnavailable(UserError):
    """A handler asked for `context.state.user` in a conversation that has no user id.

    Single-user mode (`handle(..., user_id=None)`) has no user to keep state for: use
    `context.state.conversation`, or check `context.user_id` first.
    """


class InvalidOutcome(UserError, TypeError):
    """A handler built an `Outcome` whose `data` cannot be stored as JSON (a set, a socket,
    NaN, a non-string key); raised at construction, naming the key.

    Values pydantic writes as JSON (`Decimal`, `datetime`, `UUID`, enums, pydantic models)
    are accepted and kept in their JSON form. A `TypeError` too, as `json.dumps` raises.
    """

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key
        """Where in `data` the value is, e.g. `data['s']` or `data['items'][2]`."""


class InvalidConversationFile(UserError):
    """A conversation test file (`frontdesk test`) that cannot be read, is not YAML, or is
    not in the format of docs/testing.md; the message names the file and the place."""


class IdempotencyConflict(UserError):
    """The client message id was already used in this conversation for a different text.

    Nothing was written. Send the new text with a new client message id.
    """

    def __init__(self, message: str, *, conversation_id: str, client_message_id: str) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.client_message_id = client_message_id


class MessageNotFound(UserError):
    """No message has this id."""

    def __init__(self, message: str, *, message_id: str) -> None:
        super().__init__(message)
        self.message_id = message_id


class MessageNotInConversation(MessageNotFound):
    """The message exists but belongs to another conversation."""


class ProfileMismatch(UserError):
    """A turn named a profile (`handle(..., profile=NAME)`) other than the one recorded on
    the conversation by its first transaction: a conversation is answered by one business.

    Nothing was written. Name the conversation's own profile (`recorded`), or none.
    """

    def __init__(self, message: str, *, conversation_id: str, recorded: str, named: str) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.recorded = recorded
        """The conversation's profile."""
        self.named = named
        """The profile the call named."""


class NotHandedOff(UserError):
    """An operator call (`operator_reply`, `hand_back`) on a conversation no person has.

    Open a hand-off first with `Orchestrator.hand_off`; the service answers 409.
    """

    def __init__(self, message: str, *, conversation_id: str) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id


class HandoffClaimed(UserError):
    """Another operator has claimed the conversation: only they may answer it.

    Claim it first (`Orchestrator.claim`, `POST .../claim`: a transfer, audited); the
    service answers 409.
    """

    def __init__(self, message: str, *, conversation_id: str, claimed_by: str) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.claimed_by = claimed_by


class ConversationHandedOff(UserError):
    """A call only the bot can answer (`regenerate`) while a person has the conversation.

    Hand it back first (`Orchestrator.hand_back`).
    """

    def __init__(self, message: str, *, conversation_id: str) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id


class MemoryNotFound(UserError, LookupError):
    """No current memory with this id belongs to this user (the same for another user's)."""

    def __init__(self, message: str, *, memory_id: str) -> None:
        super().__init__(message)
        self.memory_id = memory_id


class StoreError(FrontdeskError):
    """The database failed in a way the store did not expect.

    `retryable` says whether running the operation again may help.
    """

    retryable: bool = False


class StoreUnavailable(StoreError):
    """A transient failure (serialisation failure, deadlock, lost connection) that outlived the
    store's own bounded retries; the whole operation can be retried."""

    retryable = True


class ConversationBusy(StoreError):
    """Another turn held the conversation for longer than the caller was willing to wait."""

    retryable = True

    def __init__(self, message: str, *, conversation_id: str, waited: float) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.waited = waited


class LeaseLost(StoreError):
    """A turn's conversation lease was taken over by another turn while it ran.

    The lease had expired (the holder stalled past its ttl without renewing it, for example
    in a blocking call) and another process took it with a newer fencing token. The turn's
    last transaction checked the token and wrote nothing; retrying with the same
    `client_message_id` answers the stored message.
    """

    retryable = True

    def __init__(self, message: str, *, conversation_id: str, token: int | None) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.token = token


# --- The audit log (audit) ---
class AuditError(FrontdeskError):
    """The audit log failed at run time."""


class AuditWriteError(AuditError):
    """A batch of events could not be written; with `on_failure="raise"` the turn fails."""

    def __init__(self, message: str, *, conversation_id: str, events: int) -> None:
        super().__init__(message)
        self.conversation_id = conversation_id
        self.events = events


class AuditPayloadError(UserError):
    """An event payload holds something that is not JSON (NaN, a socket, ...)."""


class UnknownConversation(UserError):
    """No audit rows exist for the conversation id given."""


class AuditConfigError(ConfigError):
    """A database URL or audit setting that cannot work; the message says what to use."""


class AuditKeyError(AuditConfigError):
    """The audit master key is missing, wrong, or not the one that wrapped the data keys."""


class ReplayError(AuditError):
    """A recorded turn could not be replayed (e.g. no recorded response for an expert)."""


class ReplayAppMismatch(ReplayError):
    """The recorded turns were routed to categories the replaying app does not have: it is
    not the app that produced them, so a replay would report changes that are not there."""


# --- Turns (orchestrator) ---
class InvalidUserText(UserError):
    """The text cannot be stored or sent as a user turn."""


class EmptyMessage(InvalidUserText):
    """Empty or whitespace-only text."""


class InputTooLarge(InvalidUserText):
    """Text longer than the configured limit."""


class ForbiddenCharacters(InvalidUserText):
    """NUL or other control characters, or invalid surrogates."""


SAFE_REPLY = (
    "Sorry, we can't answer right now because of a problem on our side. Your message is"
    " saved; please try again in a moment."
)


class TurnFailed(FrontdeskError):
    """The turn could not be answered; the user's message is stored."""

    def __init__(
        self, message: str, *, user_message_id: str, stage: str, safe_reply: str = SAFE_REPLY
    ) -> None:
        super().__init__(message)
        self.user_message_id = user_message_id
        self.stage = stage
        self.safe_reply = safe_reply


class HandlerFailed(TurnFailed):
    """A category handler raised (or returned something other than an `Outcome`) in a turn
    of an `Orchestrator(handler_errors="raise")`: the development and test setting.

    `__cause__` is the handler's own exception. As for any failed turn, the user message
    stays stored (with the safe reply as a `failed` marker under it) and no reply is
    stored; nothing of the handler's outcome is kept, so a retry runs the handler again.
    """

    def __init__(
        self, message: str, *, user_message_id: str, category: str, safe_reply: str = SAFE_REPLY
    ) -> None:
        super().__init__(
            message, user_message_id=user_message_id, stage="handler", safe_reply=safe_reply
        )
        self.category = category


# --- Budgets (threads) ---
class QuestionOverBudget(UserError):
    """The new question alone is over its allowance; it is never cut, so it is refused."""


# --- Prompts (prompts) ---
class PromptError(ConfigError):
    """A prompt file is missing or malformed."""


class PromptVariableError(PromptError):
    """A prompt was rendered without a variable it uses."""


# --- The HTTP service (service) ---
class InvalidToken(UserError):
    """A bearer token the service refuses: missing, malformed, forged, expired, or signed with
    an algorithm it does not accept (`alg: none` included). The service answers 401."""


class ServiceBusy(FrontdeskError):
    """This worker runs as many turns as it may and none ended within the queue time: the
    turn was not started and nothing of it is stored (503 with `Retry-After`)."""

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


# --- Schema (frontdesk) ---
class SchemaOutdated(ConfigError):
    """The database schema is older than this code; run `frontdesk db upgrade --db URL`."""


class SchemaAhead(ConfigError):
    """The database schema is newer than this code (or unknown to it); upgrade frontdesk."""


# --- Models and experts (experts) ---
class EmptySummary(ModelError):
    """The summariser answered with no usable text; the thread must stay as it was."""
