"""A category handler's own key-value data (JSON values), kept in the conversation database.

Every value lives in a namespace (a category's name, or a name several categories share)
and a scope: one conversation, one user, or everyone. `HandlerState` is what a handler gets
(`context.state`); each of its scopes is a `HandlerStore`. Both satisfy the protocols in
`experts.category` structurally; `threads` never imports `experts`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from frontdesk._driver.tx import run_tx
from frontdesk.errors import InvalidInput, UserStateUnavailable
from frontdesk.threads._records import MAX_ID_LENGTH, check_id, check_text
from frontdesk.threads.models import HandlerData, utcnow

_data = HandlerData.__table__  # type: ignore[attr-defined]

Scope = Literal["conversation", "user", "everyone"]
"""Whose a value is: one conversation's, one user's (all their conversations), or everyone's."""

ERASED_MARKER: Final = "[erased]"
"""The value erasure leaves in place of a conversation's handler state."""

_CHUNK = 500  # Ids per statement: well under SQLite's and PostgreSQL's parameter limits.


class HandlerStore:
    """JSON values under string keys, in one namespace and one scope.

    Args:
        engine: The conversation database.
        namespace: Usually a category name; or a name several categories share.
        scope: `everyone` (the default: what `HandlerContext.store` always was),
            `conversation` or `user`.
        scope_id: The conversation id or the user id; `""` for `everyone`.
    """

    def __init__(
        self, engine: AsyncEngine, namespace: str, *, scope: Scope = "everyone", scope_id: str = ""
    ) -> None:
        if scope not in ("conversation", "user", "everyone"):
            raise InvalidInput(f"scope must be 'conversation', 'user' or 'everyone', not {scope!r}")
        if scope != "everyone":
            check_id(scope_id, f"the {scope} scope's id")
        elif scope_id:
            raise InvalidInput(f"the everyone scope has no id, got {scope_id!r}")
        self._engine = engine
        self.namespace = namespace
        self.scope: Scope = scope
        self.scope_id = scope_id

    def __repr__(self) -> str:
        whose = self.scope if self.scope == "everyone" else f"{self.scope} {self.scope_id!r}"
        return f"HandlerStore({self.namespace!r}, {whose})"

    def _here(self) -> sa.ColumnElement[bool]:
        return sa.and_(
            _data.c.namespace == self.namespace,
            _data.c.scope == self.scope,
            _data.c.scope_id == self.scope_id,
        )

    async def get(self, key: str, default: Any = None) -> Any:
        """The value under `key`, or `default` when there is none."""

        async def work(conn: AsyncConnection) -> Any:
            stmt = sa.select(_data.c.value).where(self._here(), _data.c.key == key)
            row = (await conn.execute(stmt)).first()
            return default if row is None else row[0]

        return await run_tx(self._engine, work, readonly=True)

    async def put(self, key: str, value: Any) -> None:
        """Store `value` (anything `json.dumps` accepts) under `key`, replacing any old value.

        `None` is stored as JSON `null` (the key stays, `items` lists it); `delete` removes it.

        Raises:
            InvalidInput: the value is not JSON-serialisable (sets, objects, NaN), or the key
                is not a string of 1 to 255 characters.
        """
        _check_key(key)
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise InvalidInput(f"handler data for {key!r} must be JSON-serialisable: {e}") from e

        async def work(conn: AsyncConnection) -> None:
            insert: Any = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert
            stmt = insert(_data).values(
                namespace=self.namespace,
                scope=self.scope,
                scope_id=self.scope_id,
                key=key,
                value=value,
                updated_at=utcnow(),
            )
            stmt = stmt.on_conflict_do_update(
                index_elements=[_data.c.namespace, _data.c.scope, _data.c.scope_id, _data.c.key],
                set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at},
            )
            await conn.execute(stmt)

        await run_tx(self._engine, work)

    async def delete(self, key: str) -> bool:
        """Remove `key` and its value (the row is deleted); whether there was one."""

        async def work(conn: AsyncConnection) -> bool:
            stmt = sa.delete(_data).where(self._here(), _data.c.key == key)
            return bool((await conn.execute(stmt)).rowcount)

        return await run_tx(self._engine, work)

    async def items(self, prefix: str = "") -> list[tuple[str, Any]]:
        """Every `(key, value)` whose key starts with `prefix` (case-sensitive), sorted by key."""

        async def work(conn: AsyncConnection) -> list[tuple[str, Any]]:
            # substr, not LIKE: SQLite's LIKE ignores ASCII case and PostgreSQL's does not.
            stmt = sa.select(_data.c.key, _data.c.value).where(
                self._here(), sa.func.substr(_data.c.key, 1, len(prefix)) == prefix
            )
            # Sorted here, not by the database, whose collation may differ between backends.
            return sorted((row[0], row[1]) for row in await conn.execute(stmt))

        return await run_tx(self._engine, work, readonly=True)

    def shared(self, namespace: str) -> HandlerStore:
        """The same scope (this conversation, this user, or everyone) in another namespace.

        A category's data is its own; data several categories use (a shop's orders, which
        one category places and others look up or refund) lives in a namespace they share.
        """
        check_id(namespace, "namespace")
        return HandlerStore(self._engine, namespace, scope=self.scope, scope_id=self.scope_id)


class HandlerState:
    """A handler's state in one namespace, in each of its three scopes (`context.state`).

    Args:
        engine: The conversation database.
        namespace: The category's name (or a shared name, from `shared`).
        conversation_id: The turn's conversation.
        user_id: The turn's user; `None` in single-user mode, where `user` raises.
    """

    def __init__(
        self, engine: AsyncEngine, namespace: str, *, conversation_id: str, user_id: str | None
    ) -> None:
        check_id(namespace, "namespace")
        self._engine = engine
        self.namespace = namespace
        self._conversation_id = conversation_id
        self._user_id = user_id
        self.conversation = HandlerStore(
            engine, namespace, scope="conversation", scope_id=conversation_id
        )
        """This conversation's values only (a pending order, a ticket being filed)."""
        self.everyone = HandlerStore(engine, namespace)
        """Values every conversation of every user sees (settings, counters, caches)."""

    @property
    def user(self) -> HandlerStore:
        """This user's values, seen from every conversation of theirs (their orders).

        Raises:
            UserStateUnavailable: the conversation has no user id (single-user mode).
        """
        if self._user_id is None:
            raise UserStateUnavailable(
                f"{self.namespace}: context.state.user needs a user id, and this conversation"
                " has none (handle(..., user_id=None)); pass user_id, or keep this value in"
                " context.state.conversation"
            )
        return HandlerStore(self._engine, self.namespace, scope="user", scope_id=self._user_id)

    def shared(self, namespace: str) -> HandlerState:
        """The three scopes of a namespace several categories share (the shop's orders).

        Every category that names the same namespace sees the same values, still per
        conversation, per user or for everyone.
        """
        return HandlerState(
            self._engine,
            namespace,
            conversation_id=self._conversation_id,
            user_id=self._user_id,
        )


def _check_key(key: str) -> None:
    if not isinstance(key, str):
        raise InvalidInput(f"handler data keys are strings, got {type(key).__name__}")
    check_text(key, "handler data key")
    if not key or len(key) > MAX_ID_LENGTH:
        raise InvalidInput(f"handler data key must be 1 to {MAX_ID_LENGTH} characters")


def delete_user_state(conn: Connection, user_id: str) -> int:
    """Delete every value in `user_id`'s scope, in every namespace; how many were deleted."""
    where = sa.and_(_data.c.scope == "user", _data.c.scope_id == user_id)
    return int(conn.execute(sa.delete(_data).where(where)).rowcount)


def erase_conversation_state(
    conn: Connection, conversation_ids: Iterable[str], marker: Any = ERASED_MARKER
) -> int:
    """Replace the value of every key in these conversations' scope with `marker`; how many
    (values that are the marker already are not counted again: a re-run counts 0)."""
    ids = sorted(set(conversation_ids))
    # Compared as stored JSON text (PostgreSQL's `json` has no equality operator).
    not_yet = sa.cast(_data.c.value, sa.Text) != json.dumps(marker)
    count = 0
    for start in range(0, len(ids), _CHUNK):
        stmt = (
            sa.update(_data)
            .where(
                _data.c.scope == "conversation",
                _data.c.scope_id.in_(ids[start : start + _CHUNK]),
                not_yet,
            )
            .values(value=marker, updated_at=utcnow())
        )
        count += int(conn.execute(stmt).rowcount)
    return count
