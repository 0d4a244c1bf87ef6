"""Categories of requests: what a developer registers to teach frontdesk a new kind of request.

A `Category` pairs a pydantic request model (what the request expert extracts from the
thread) with a handler ("TradCode": plain async Python that acts on it and returns an
`Outcome`, whose instruction the response expert turns into the reply).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import inspect
import math
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from pydantic import BaseModel, Field, field_validator
from pydantic_core import to_jsonable_python

from frontdesk.errors import ConfigError, InvalidOutcome, UserError
from frontdesk.frozen import quick_init
from frontdesk.memory import Memory

_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")


class NeedMoreInfo(BaseModel):
    """The request expert's answer when required fields cannot be filled from the thread."""

    missing: list[str] = Field(description="Names of the required fields the user has not given.")
    question: str = Field(description="One short question asking the user for exactly those.")


class Outcome(BaseModel):
    """What a handler decided: an instruction for the response expert, and data for the bot."""

    instruction: str
    """What the reply must do, e.g. "Ask the user to confirm buying one bag of purple potatoes"."""
    data: dict[str, Any] = Field(default_factory=dict)
    """Anything the embedding bot acts on (an order id); never sent to a model. The library
    never writes its own flags here.

    Checked here, at construction, because it is stored with the turn: JSON values, and what
    pydantic writes as JSON (`Decimal`, `datetime`, `UUID`, enums, pydantic models), which
    are kept in their JSON form (`Decimal("1.50")` becomes `"1.50"`); anything else (a set,
    bytes, NaN, an object) raises `InvalidOutcome` naming the key."""

    @field_validator("data", mode="after")
    @classmethod
    def _json_data(cls, data: dict[str, Any]) -> dict[str, Any]:
        return {key: _json_value(value, f"data[{key!r}]") for key, value in data.items()}

    reply: str | None = None
    """Approved words for the customer, sent as the reply verbatim (the app templates them
    with the request's fields): no response expert call, streamed as one delta, audited as
    approved; for wording a compliance team signed off (a disclosure, a fee). `None`: the
    response expert writes the reply from `instruction`. The same words are the fallback
    when the response expert cannot write a reply after the handler acted
    (docs/providers.md, "Failing softly"). Stored with the turn: a retry sends them again."""

    @field_validator("reply", mode="after")
    @classmethod
    def _some_reply(cls, reply: str | None) -> str | None:
        if reply is not None and not reply.strip():
            raise InvalidOutcome(
                "Outcome reply is empty; give the words to send, or None to let the"
                " response expert write the reply",
                key="reply",
            )
        return reply

    handoff: str | None = None
    """Why a person should take over, or None. Set, the conversation is handed off with
    this reason in the same transaction that stores the outcome (`Reply.handoff` is True),
    and a retry of the turn opens no second hand-off."""

    resolves: bool = False
    """The handler's effect completes what the customer came for: the conversation's
    `resolution` becomes `resolved` (by `handler`) in the turn's last transaction."""


_AS_TEXT = (Decimal, dt.datetime, dt.date, dt.time, dt.timedelta, uuid.UUID)
"""Types pydantic writes as JSON strings; kept in that form (the stored form)."""


def _json_value(value: Any, where: str) -> Any:
    """`value` in its JSON form, or `InvalidOutcome` naming `where` it is.

    Stricter than pydantic's own JSON mode on purpose: that writes a set as a list in an
    arbitrary order, and bytes as text in whatever encoding, so what a test or a replay
    compares would not be what the handler meant."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise InvalidOutcome(f"Outcome {where} is {value}, which JSON cannot hold", key=where)
    if isinstance(value, enum.Enum):
        return _json_value(value.value, where)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, _AS_TEXT):
        return to_jsonable_python(value)
    if isinstance(value, list | tuple):
        return [_json_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidOutcome(
                    f"Outcome {where} has the key {k!r}; JSON object keys are strings",
                    key=where,
                )
            out[k] = _json_value(v, f"{where}[{k!r}]")
        return out
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _json_value(dataclasses.asdict(value), where)
    hint = " (use a sorted list)" if isinstance(value, set | frozenset) else ""
    raise InvalidOutcome(
        f"Outcome {where} is a {type(value).__name__}, which cannot be stored as JSON{hint};"
        " use JSON values (str, int, float, bool, None, list, dict), Decimal, datetime, UUID,"
        " an enum or a pydantic model",
        key=where,
    )


class HandlerStore(Protocol):
    """One scope of a handler's key-value data (JSON values), kept in the conversation database."""

    async def get(self, key: str, default: Any = None) -> Any:
        """The value under `key` in this scope, or `default`."""
        ...

    async def put(self, key: str, value: Any) -> None:
        """Store a JSON-able value under `key` (`None` is stored as null; see `delete`)."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove `key`; whether it was there."""
        ...

    async def items(self, prefix: str = "") -> list[tuple[str, Any]]:
        """Every `(key, value)` whose key starts with `prefix`, sorted by key."""
        ...

    def shared(self, namespace: str) -> HandlerStore:
        """The same scope in a namespace several categories share (a shop's orders)."""
        ...


class HandlerState(Protocol):
    """A handler's data in its three scopes; see docs/adding-a-category.md for which to use."""

    @property
    def conversation(self) -> HandlerStore:
        """This conversation only (a form being filled in, a pending confirmation)."""
        ...

    @property
    def user(self) -> HandlerStore:
        """This user, from any of their conversations (their orders, tickets).

        Raises `UserStateUnavailable` when the conversation has no user id."""
        ...

    @property
    def everyone(self) -> HandlerStore:
        """Every conversation of every user (settings, stock); the same as `context.store`."""
        ...

    def shared(self, namespace: str) -> HandlerState:
        """The three scopes of a namespace the categories naming it share."""
        ...


class MemoryWriter(Protocol):
    """`HandlerContext.memory`: the turn's user's long-term memory, for a handler."""

    async def remember(self, text: str, *, key: str | None = None) -> Memory:
        """Remember `text` about the turn's user; facts with the same `key` supersede one
        another (the newest wins)."""
        ...

    async def recall(self) -> list[Memory]:
        """The turn's user's current facts (superseded and forgotten ones left out), newest
        first: what a handler may act on ("use the income they told us last month")."""
        ...


class _NoUser:
    """The memory of a turn without a `user_id`: memories belong to a user."""

    async def remember(self, text: str, *, key: str | None = None) -> Memory:
        raise UserError(
            "this turn has no user_id, and memories belong to a user; pass user_id= to handle()"
        )

    async def recall(self) -> list[Memory]:
        return []  # No user, nothing remembered: a handler need not check first.


@quick_init
@dataclass(frozen=True, kw_only=True)
class HandlerContext:
    """What a handler knows besides the request."""

    conversation_id: str
    user_id: str | None
    category: str
    turn_id: str
    store: HandlerStore
    """The category's data that every conversation of every user sees (`state.everyone`)."""
    state: HandlerState
    """The category's data per conversation, per user, or for everyone; `state.shared(name)`
    for data several categories share."""
    idempotency_key: str = ""
    """Stable per turn: the same on every retry of this user message (32 hex characters).

    The orchestrator stores the handler's outcome before the reply is produced and never
    runs the handler again for a turn whose outcome is stored; a crash *inside* the handler
    (or before its outcome is stored) does run it again on retry, with the same key. Key
    every external effect on it (a payment's idempotency key, a row's unique key) so that
    the second run finds the first one's effect instead of repeating it."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """Whatever the embedding application passed to `Orchestrator(context=...)`."""
    memory: MemoryWriter = field(default_factory=_NoUser)
    """Long-term memory of the turn's user: `await context.memory.remember(text, key=...)`
    (a `verified` fact: the business's record), `await context.memory.recall()` (their
    current facts, each with its `trust`; `[]` without a user)."""
    from_memory: frozenset[str] = frozenset()
    """The request fields the request expert filled from remembered facts rather than from
    this conversation. Remembered facts may be the customer's own unverified words: check
    such a field (an account number, a limit) against the account data of `user_id`, or
    ask, before acting on it (docs/adding-a-category.md)."""
    corrected: frozenset[str] = frozenset()
    """The request fields the customer changed since the last extraction ("make it three
    bags", "no, Idaho"): during a request in progress, or of the request they were asked
    to confirm (docs/conversations.md)."""


Handler = Callable[[Any, HandlerContext], Awaitable[Outcome]]


@dataclass(frozen=True, kw_only=True)
class Category:
    """One kind of request the bot handles.

    Args:
        name: Upper-case label the triage expert picks, e.g. `ORDERS`.
        description: One line telling the triage expert what belongs here.
        request: The pydantic model the request expert extracts.
        handler: `async (request, context) -> Outcome`.
        examples: A few utterances that belong here.
        request_prompt: Optional prompt name (in `prompts/`) or text replacing the default
            request prompt for this category.
        knowledge: Send the request expert the passages of the business's documents found
            for the question too (the response expert always gets them); for a category
            whose fields depend on a policy (docs/knowledge.md).
        memory: Send the request expert what is remembered about the customer (the
            default); `False` sends it no remembered fact at all, so that every field comes
            from this conversation (a payment's accounts and amount).
        confirm: Run the handler only after the customer confirms the extracted request
            (a payment, a transfer): `True` asks a question built from the request's fields
            (through the response expert); a callable `(request) -> str` returns the
            question, sent verbatim. Only a "yes" on the next turn runs the handler, once,
            with the request that was asked about (docs/adding-a-category.md).
    """

    name: str
    description: str
    request: type[BaseModel] | None
    handler: Handler | None
    examples: tuple[str, ...] | list[str] = ()
    request_prompt: str | None = None
    knowledge: bool = False
    memory: bool = True
    confirm: bool | Callable[[BaseModel], str] = False

    def __post_init__(self) -> None:
        problems = []
        if not _NAME.match(self.name):
            problems.append(
                f"name {self.name!r} must be UPPER_SNAKE_CASE (letters, digits, _), e.g. 'ORDERS'"
            )
        if not self.description.strip():
            problems.append(f"category {self.name!r} needs a description for the triage expert")
        if (self.request is None) != (self.handler is None):
            problems.append(
                f"category {self.name!r} needs both a request model and a handler (or neither)"
            )
        if self.handler is not None and not _is_async(self.handler):
            problems.append(
                f"category {self.name!r}: the handler {_name_of(self.handler)} is not async;"
                " declare it `async def` (a turn awaits it)"
            )
        if self.request is not None and not (
            isinstance(self.request, type) and issubclass(self.request, BaseModel)
        ):
            problems.append(f"category {self.name!r}: request must be a pydantic BaseModel class")
        if not isinstance(self.memory, bool):
            problems.append(f"category {self.name!r}: memory must be True or False")
        if not isinstance(self.knowledge, bool):
            problems.append(f"category {self.name!r}: knowledge must be True or False")
        elif self.knowledge and self.request is None:
            problems.append(
                f"category {self.name!r}: knowledge=True needs a request model (it is for the"
                " request expert)"
            )
        if not (isinstance(self.confirm, bool) or callable(self.confirm)):
            problems.append(
                f"category {self.name!r}: confirm must be True, False or a callable"
                " (request) -> question"
            )
        elif self.confirm is not False and self.handler is None:
            problems.append(
                f"category {self.name!r}: confirm needs a request model and a handler (it"
                " holds the request until the customer says yes)"
            )
        if problems:
            raise ConfigError("; ".join(problems))
        object.__setattr__(self, "examples", tuple(self.examples))


def _is_async(handler: object) -> bool:
    """An `async def` function, a partial of one, or an object whose `__call__` is one."""
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 (a callable object's method)
    return not inspect.isfunction(handler) and inspect.iscoroutinefunction(call)


def _name_of(handler: object) -> str:
    return str(getattr(handler, "__qualname__", None) or repr(handler))


OTHER = "OTHER"
"""Built-in: small talk or out of scope; a polite reply, no handler."""
HUMAN = "HUMAN"
"""Built-in: the user asks for a person or is distressed; a hand-off outcome."""
BUILTIN_NAMES = (OTHER, HUMAN)


def check_registry(categories: list[Category]) -> Mapping[str, Category]:
    """Validate a list of categories and index it by name; lists every problem at once.

    Raises:
        ConfigError: on duplicate or reserved names, or an empty list.
    """
    problems = []
    by_name: dict[str, Category] = {}
    for category in categories:
        if not isinstance(category, Category):
            problems.append(f"{category!r} is not an experts.Category")
            continue
        if category.name in BUILTIN_NAMES:
            problems.append(f"{category.name} is a built-in category; pick another name")
        if category.name in by_name:
            problems.append(f"duplicate category name {category.name!r}")
        by_name[category.name] = category
    if problems:
        raise ConfigError("bad categories: " + "; ".join(problems))
    return by_name
