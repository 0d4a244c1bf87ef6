"""In-memory doubles of what a handler is given, so a handler test needs no orchestrator.

`handler_context()` builds a real `HandlerContext` whose state scopes keep values in a dict
(with the same checks and JSON round trip as the database's) and whose memory records what
the handler remembers and answers `recall` from it. Re-exported by `frontdesk.testing`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from frontdesk.errors import InvalidInput, UserError, UserStateUnavailable
from frontdesk.experts.category import HandlerContext
from frontdesk.memory import MAX_FACT_CHARS, Memory

__all__ = ["InMemoryState", "InMemoryStore", "RecordingMemory", "handler_context"]

_MAX_KEY = 255

Values = dict[tuple[str, str, str], dict[str, str]]
"""(namespace, scope, scope id) -> key -> the value as JSON text."""


class InMemoryStore:
    """One scope of handler data in a dict: `get`, `put`, `delete`, `items`, `shared`.

    Values are kept as JSON text, as the database keeps them, so a value that `put`
    accepts here is one the real store accepts, and a later change to the object put does
    not change what is stored.
    """

    def __init__(self, values: Values, namespace: str, scope: str, scope_id: str) -> None:
        self._values = values
        self.namespace = namespace
        self.scope = scope
        self.scope_id = scope_id

    def __repr__(self) -> str:
        whose = self.scope if self.scope == "everyone" else f"{self.scope} {self.scope_id!r}"
        return f"InMemoryStore({self.namespace!r}, {whose})"

    @property
    def _here(self) -> dict[str, str]:
        return self._values.setdefault((self.namespace, self.scope, self.scope_id), {})

    async def get(self, key: str, default: Any = None) -> Any:
        """The value under `key`, or `default` when there is none."""
        text = self._here.get(key)
        return default if text is None else json.loads(text)

    async def put(self, key: str, value: Any) -> None:
        """Store `value` under `key` (`InvalidInput` when `json.dumps` refuses it)."""
        _check_key(key)
        try:
            text = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise InvalidInput(f"handler data for {key!r} must be JSON-serialisable: {e}") from e
        self._here[key] = text

    async def delete(self, key: str) -> bool:
        """Remove `key`; whether it was there."""
        return self._here.pop(key, None) is not None

    async def items(self, prefix: str = "") -> list[tuple[str, Any]]:
        """Every `(key, value)` whose key starts with `prefix`, sorted by key."""
        return sorted((k, json.loads(v)) for k, v in self._here.items() if k.startswith(prefix))

    def shared(self, namespace: str) -> InMemoryStore:
        """The same scope in the namespace `namespace`."""
        return InMemoryStore(self._values, namespace, self.scope, self.scope_id)


class InMemoryState:
    """`context.state` in a dict: `conversation`, `user`, `everyone`, `shared(name)`."""

    def __init__(
        self, values: Values, namespace: str, *, conversation_id: str, user_id: str | None
    ) -> None:
        self._values = values
        self.namespace = namespace
        self._conversation_id = conversation_id
        self._user_id = user_id
        self.conversation = InMemoryStore(values, namespace, "conversation", conversation_id)
        """This conversation's values."""
        self.everyone = InMemoryStore(values, namespace, "everyone", "")
        """Every conversation's values."""

    @property
    def user(self) -> InMemoryStore:
        """This user's values; `UserStateUnavailable` without a user, as in a real turn."""
        if self._user_id is None:
            raise UserStateUnavailable(
                f"{self.namespace}: context.state.user needs a user id, and this context has"
                " none (handler_context(user_id=None)); keep the value in"
                " context.state.conversation"
            )
        return InMemoryStore(self._values, self.namespace, "user", self._user_id)

    def shared(self, namespace: str) -> InMemoryState:
        """The three scopes of the namespace `namespace`."""
        return InMemoryState(
            self._values,
            namespace,
            conversation_id=self._conversation_id,
            user_id=self._user_id,
        )


@dataclass
class RecordingMemory:
    """`context.memory` for a test: `remember` is recorded and `recall` answers from it.

    Facts with the same key supersede one another, as in the database. Seed what a user
    said earlier with `remember` before calling the handler.
    """

    user_id: str | None
    conversation_id: str
    message_id: str
    written: list[Memory] = field(default_factory=list)
    """Every fact remembered, in order (superseded ones included)."""

    async def remember(self, text: str, *, key: str | None = None) -> Memory:
        """Record `text` about the user (`key` supersedes the fact with the same key)."""
        if self.user_id is None:
            raise UserError(
                "this context has no user_id, and memories belong to a user;"
                " pass user_id= to handler_context()"
            )
        text = " ".join(str(text).split())
        if not text or len(text) > MAX_FACT_CHARS:
            raise UserError(f"a fact is 1 to {MAX_FACT_CHARS} characters of text")
        now = dt.datetime.now(dt.UTC)
        memory = Memory(
            id=uuid.uuid4().hex,
            user_id=self.user_id,
            text=text,
            key=key,
            source="handler",
            conversation_id=self.conversation_id,
            message_id=self.message_id,
            created_at=now,
            updated_at=now,
            trust="verified",
        )
        self.written.append(memory)
        return memory

    async def recall(self) -> list[Memory]:
        """The current facts, newest first (one per key)."""
        current: list[Memory] = []
        keys: set[str] = set()
        for memory in reversed(self.written):
            if memory.key is not None:
                if memory.key in keys:
                    continue
                keys.add(memory.key)
            current.append(memory)
        return current


def handler_context(
    *,
    user_id: str | None = "test-user",
    conversation_id: str = "test-conversation",
    category: str = "TEST",
    from_memory: Iterable[str] = (),
    **extras: Any,
) -> HandlerContext:
    """A real `HandlerContext` for calling a handler directly in a test.

    Its `state` scopes and `store` live in memory (shared by the contexts `shared(name)`
    gives), `memory` is a `RecordingMemory`, `idempotency_key` is stable for the same
    conversation id (32 hex characters, like a turn's), and `extras` are the keyword
    arguments not named here (what `Orchestrator(context=...)` would pass).

    Args:
        user_id: The turn's user; `None` is single-user mode (`state.user` raises).
        conversation_id: The turn's conversation.
        category: The category name, which is also the state's namespace.
        from_memory: The request fields the request expert filled from remembered facts
            (`context.from_memory`), to test that the handler checks them.
        **extras: `context.extras` (an API client, settings).
    """
    values: Values = {}
    turn_id = "test-turn-" + _digest(conversation_id, category)[:8]
    state = InMemoryState(values, category, conversation_id=conversation_id, user_id=user_id)
    extra_values: Mapping[str, Any] = dict(extras)
    return HandlerContext(
        conversation_id=conversation_id,
        user_id=user_id,
        category=category,
        turn_id=turn_id,
        store=state.everyone,
        state=state,
        idempotency_key=_digest(conversation_id, turn_id)[:32],
        extras=extra_values,
        memory=RecordingMemory(
            user_id=user_id, conversation_id=conversation_id, message_id=turn_id
        ),
        from_memory=frozenset(from_memory),
    )


def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _check_key(key: str) -> None:
    if not isinstance(key, str) or not key or len(key) > _MAX_KEY:
        raise InvalidInput(f"handler data keys are strings of 1 to {_MAX_KEY} characters")
    if "\x00" in key:
        raise InvalidInput("handler data keys cannot hold NUL characters")
