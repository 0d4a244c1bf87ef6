"""The conversation store: every message as a row of a tree, on SQLite or PostgreSQL.

Nothing of a conversation lives only in process memory: any process may handle any message
of any conversation, and a turn reads what it needs from the database (a start reuses the
path it read the turn before only while the database says it still holds:
`threads/_path_cache.py`). Turns on one conversation are serialised across processes by
`conversation_lock` (a lease row, so no transaction stays open while the models think);
each write is one short transaction that locks the conversation row (PostgreSQL) or takes
SQLite's write lock (`BEGIN IMMEDIATE`, because SQLite ignores `SELECT ... FOR UPDATE`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import anyio
import sqlalchemy as sa
import structlog
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver.tx import run_sync_tx
from frontdesk.db import create_engine, dispose_engine, one_call_turns
from frontdesk.errors import InvalidInput, MessageNotFound, StoreError, StoreUnavailable
from frontdesk.jobs import store as _jobs
from frontdesk.jobs.store import JobSpec
from frontdesk.schema import ensure_schema
from frontdesk.threads import _lease, _outcomes, _server_turn, _writes, spend
from frontdesk.threads import handoff as handoff_sql
from frontdesk.threads import ruled_values as _ruled
from frontdesk.threads._lease import TurnLease
from frontdesk.threads._outcomes import Previous, TurnOutcome, TurnRecord
from frontdesk.threads._path_cache import PathCache
from frontdesk.threads._records import (
    ConversationRecord,
    MessageRecord,
    check_id,
    check_text,
    new_id,
)
from frontdesk.threads._writes import UNSET, ParentId
from frontdesk.threads.handler_state import (
    ERASED_MARKER,
    HandlerState,
    HandlerStore,
    delete_user_state,
    erase_conversation_state,
)
from frontdesk.threads.handoff import (
    HandedBack,
    HandoffPolicy,
    HandoffRecord,
    HandoffStore,
    Opened,
)
from frontdesk.threads.models import Conversation, Message, utcnow
from frontdesk.threads.resolution import resolve
from frontdesk.threads.ruled_values import Scrub
from frontdesk.threads.spend import Spent
from frontdesk.threads.summaries import PathSinceSummary, path_since_newest_sync

__all__ = [
    "DEFAULT_LEASE_TTL",
    "ERASED_MARKER",
    "UNSET",
    "ConversationRecord",
    "ConversationStore",
    "HandlerState",
    "HandlerStore",
    "MessageRecord",
    "Previous",
    "TurnLease",
    "TurnOutcome",
    "TurnRecord",
    "TurnStart",
]

T = TypeVar("T")
_log = structlog.get_logger("threads.store")

DEFAULT_LEASE_TTL = _lease.DEFAULT_TTL
"""Seconds a turn's lease lives without its heartbeat (renewed every third of it)."""

_conv = Conversation.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True, slots=True)
class FinishedTurn:
    """What a turn's last transaction did besides the reply (`ConversationStore.finish_turn`)."""

    opened: Opened | None = None
    """The hand-off the stored outcome opened (`Outcome(handoff=...)`, the HUMAN route)."""
    jobs: list[_jobs.Deferred] = field(default_factory=list)
    """The jobs recorded with the reply (`jobs.store`; one whose queueing lock has a
    job waiting is not among them)."""
    resolved: bool = False
    """The outcome's `resolves` (or the customer's closing) made the conversation `resolved`
    (it was not already)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnStart:
    """What a turn's first transaction read and wrote (`ConversationStore.start_turn`)."""

    message: MessageRecord
    """The user message (the stored one for an idempotent repeat)."""
    created: bool
    """`False` for an idempotent repeat of a stored message."""
    path: PathSinceSummary | None
    """The path to `message` from the newest summary's cut point; `None` for an idempotent
    repeat, which may be answered already (read it with `SummaryStore.path_since_newest`
    only when the turn must run), so that a replay reads nothing that grows with the
    conversation; and `None` while a person has the conversation (no expert will run)."""
    handoff: HandoffRecord | None = None
    """The conversation's open hand-off, when a person has it (`start_turn(handoff=...)`)."""
    answer: MessageRecord | None = None
    """The waiting marker written under a new `message` kept for a person."""
    handed_back: HandedBack | None = None
    """A hand-off this transaction closed because its user waited past the timeout."""
    recalled: Any = None
    """What the `recall` reader given to `start_turn` returned (the user's memories)."""
    previous_category: str | None = None
    """The category the user message before `message` on `path` was routed to (its stored
    outcome's), read in the same transaction; `None` without a path or such an outcome."""
    previous: Previous | None = None
    """The turn before on `path` (its category and confirmation), read with
    `previous_category`."""
    stored: TurnRecord | None = None
    """For an idempotent repeat, what is stored of its turn (reply and outcome: two indexed
    reads in the same transaction, so a replay needs no read of its own); else `None`."""


class ConversationStore:
    """Conversations and their messages (a tree per conversation), shared across processes.

    Open one with `await ConversationStore.open(url)`; close it with `await store.aclose()`.
    """

    engine: AsyncEngine
    """The database engine; public so that the audit log can share the database."""
    url: str
    """The normalised URL (async driver named), its password masked: it is for showing."""
    handoffs: HandoffStore
    """The hand-offs to a person kept in this database (`threads.handoff`)."""

    def __init__(self, engine: AsyncEngine) -> None:
        """Wrap an engine whose database is already at the head schema (see `open`)."""
        self.engine = engine
        self.url = engine.url.render_as_string(hide_password=True)
        self.handoffs = HandoffStore(engine)
        self._paths = PathCache()

    @classmethod
    async def open(cls, url: str) -> ConversationStore:
        """Open the store at `url`, initialising an empty database.

        Args:
            url: `sqlite:///PATH`, `sqlite+aiosqlite:///PATH`, `postgresql://...` or
                `postgresql+asyncpg://...`.

        Raises:
            ConfigError: an unsupported URL.
            SchemaOutdated: the database schema is behind; run `frontdesk db upgrade`.
            StoreUnavailable: the database cannot be reached.
        """
        engine = create_engine(url)
        try:
            await ensure_schema(engine)
        except (DBAPIError, OSError) as e:
            await engine.dispose()
            shown = engine.url.render_as_string(hide_password=True)
            reason = e.orig if isinstance(e, DBAPIError) else e  # without SQLAlchemy's dump
            raise StoreUnavailable(f"cannot reach the database {shown}: {reason}") from e
        except BaseException:
            await engine.dispose()
            raise
        return cls(engine)

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await dispose_engine(self.engine)

    # Locks -------------------------------------------------------------------------------

    def conversation_lock(
        self, conversation_id: str, *, timeout: float = 30.0, ttl: float = _lease.DEFAULT_TTL
    ) -> AbstractAsyncContextManager[None]:
        """Serialise turns on one conversation across processes.

        Holds a lease row (renewed every `ttl / 3` while held, so a crashed holder's lease
        expires after `ttl`); waiters poll with jittered backoff. No transaction is open
        while it is held.

        Raises:
            ConversationBusy: not acquired within `timeout` seconds (retryable).
        """
        check_id(conversation_id, "conversation_id")
        return _lease.hold_lease(
            self.engine,
            f"conversation:{conversation_id}",
            new_id(),
            wait=timeout,
            ttl=ttl,
            subject=conversation_id,
        )

    def turn_lease(
        self, conversation_id: str, *, timeout: float = 30.0, ttl: float = _lease.DEFAULT_TTL
    ) -> TurnLease:
        """The conversation's lock for one turn, taken and released inside the turn's writes.

        Pass it to `add_user_message(lease=...)` (or `take()` it alone), end the turn with
        `finish_turn`, and `aclose()` it in a `finally` for a turn that fails. It excludes
        `conversation_lock` holders and other turns alike, across processes.
        """
        check_id(conversation_id, "conversation_id")
        return TurnLease(
            self.engine,
            f"conversation:{conversation_id}",
            new_id(),
            wait=timeout,
            ttl=ttl,
            subject=conversation_id,
        )

    async def try_lease(self, name: str, owner: str, ttl: float) -> bool:
        """Take the lease `name` for `owner` for `ttl` seconds unless another owner holds it.

        Taking a lease one already holds renews it. Returns whether `owner` holds it now.
        """
        return await _lease.try_lease(self.engine, name, owner, ttl)

    async def release_lease(self, name: str, owner: str) -> None:
        """Give up the lease `name` if `owner` holds it (otherwise do nothing)."""
        await _lease.release_lease(self.engine, name, owner)

    # Writes ------------------------------------------------------------------------------

    async def add_user_message(
        self,
        conversation_id: str,
        content: str,
        *,
        user_id: str | None = None,
        client_message_id: str | None = None,
        parent_id: ParentId = UNSET,
        token_count: int = 0,
        lease: TurnLease | None = None,
    ) -> tuple[MessageRecord, bool]:
        """Append a user message (creating the conversation if needed) and make it the leaf.

        Args:
            conversation_id: The conversation; created on first use, owned by `user_id`.
            content: The text as the user sent it.
            user_id: Recorded when the conversation is created.
            client_message_id: The client's id for this message; a repeat with the same
                text returns the stored message instead of adding one.
            parent_id: The message this one follows: `UNSET` for the active leaf, `None` for
                a new root, or a message id of this conversation (an edit is a sibling).
            token_count: The message's token count, if known.
            lease: A `turn_lease` not yet taken: it is waited for, then taken in the
                same transaction as the message (or the idempotent lookup).

        Returns:
            `(record, created)`; `created` is `False` for an idempotent repeat.

        Raises:
            IdempotencyConflict: `client_message_id` was used here for another text.
            MessageNotFound: `parent_id` does not exist or is in another conversation.
            InvalidInput: text or ids that cannot be stored (NUL, lone surrogates).
            ConversationBusy: `lease` was not free within its timeout.
        """
        _check_user_message(conversation_id, content, user_id, client_message_id)

        def work(conn: Connection) -> tuple[MessageRecord, bool]:
            return _writes.add_user(
                conn, conversation_id, content, user_id, client_message_id, parent_id, token_count
            )

        async def run() -> tuple[MessageRecord, bool]:
            if lease is None:
                return await run_sync_tx(self.engine, work)
            return await _taking(lease, work)

        return await _retrying_a_new_conversation(run, client_message_id)

    async def start_turn(
        self,
        conversation_id: str,
        content: str,
        *,
        lease: TurnLease,
        user_id: str | None = None,
        client_message_id: str | None = None,
        parent_id: ParentId = UNSET,
        token_count: int = 0,
        handoff: HandoffPolicy | None = None,
        also: Callable[[Connection, TurnStart], None] | None = None,
        recall: Callable[[Connection], Any] | None = None,
        profile: str | None = None,
    ) -> TurnStart:
        """A turn's first transaction: take `lease`, add the user message, read its path
        (and run `recall`, a read of the same transaction, into `TurnStart.recalled`).

        The same as `add_user_message(..., lease=lease)` (same arguments, same errors),
        except that a user message left unanswered at the leaf (a crashed turn) first gets
        its `failed` marker; plus the path to the new message as far back as the newest
        summary's cut point (`threads.builder.thread_since` turns it into the user thread),
        all in one transaction, so a turn starts with one round of database work.

        With `handoff`, the conversation's open hand-off is read in the same transaction
        (`TurnStart.handoff`): a new message is then kept for the person, with the policy's
        waiting message as its marker (`TurnStart.answer`) and no path read. A hand-off
        whose user waited past the policy's timeout is handed back first, leaving the
        timeout message, and the message goes to the bot (`TurnStart.handed_back`). `also`
        runs last in the transaction with what it wrote (the audit batch). `profile` is
        recorded on a new conversation and checked on an existing one (`ProfileMismatch`),
        in the same upsert.
        """
        _check_user_message(conversation_id, content, user_id, client_message_id)
        if parent_id is UNSET and one_call_turns(self.engine):
            # The lookups are no part of the turn's rows: read beside the call, alone.
            beside = None if recall is None else _beside(self.engine, recall)
            try:
                return await self._start_in_one_call(
                    conversation_id,
                    content,
                    lease=lease,
                    user_id=user_id,
                    client_message_id=client_message_id,
                    token_count=token_count,
                    handoff=handoff,
                    also=also,
                    beside=beside,
                    profile=profile,
                )
            except _server_turn.Fallback:
                # Not the usual start: the general one below, which knows every case,
                # with what the lookups read (none of it again).
                if beside is not None:
                    ok, read = await _settled(beside)
                    if ok:
                        recall = lambda _conn: read  # noqa: E731
            finally:
                if beside is not None and not beside.done():  # Not left on a connection.
                    await _settled(beside)

        versions: list[int] = []  # The path version the path was read at (none: no path).

        def work(conn: Connection) -> TurnStart:
            versions.clear()  # A retried transaction reads it again.
            handed_back = None
            if handoff is not None:
                handed_back = handoff_sql.expire_due(conn, conversation_id, handoff)
            # One read: the conversation locked, its leaf's role, the message with this
            # client id, and the open hand-off.
            lock = functools.partial(
                _writes.lock_for_turn,
                conn,
                conversation_id,
                user_id,
                client_message_id,
                profile=profile,
                handoff=handoff is not None,
            )
            locked = lock()
            if parent_id is UNSET and locked.unanswered(client_message_id):
                # Following the leaf: never stack two user turns (rare: a crashed turn).
                _outcomes.answer_unanswered_leaf(conn, conversation_id, client_message_id)
                locked = lock()  # The leaf is its marker now.
            message, created = _writes.add_user(
                conn,
                conversation_id,
                content,
                user_id,
                client_message_id,
                parent_id,
                token_count,
                profile,
                locked=locked,
            )
            held = None if locked.handoff is None else HandoffRecord.from_row(locked.handoff)
            answer = None
            if held is not None and created:
                assert handoff is not None
                answer = handoff_sql.held(conn, message, held, handoff.waiting_message)
            path = None
            if created and held is None:
                path = self._paths.after(message, locked.path_version) or path_since_newest_sync(
                    conn, message.id
                )
                versions.append(locked.path_version)
            stored = None if created else _outcomes.turn(conn, message.id)
            # A message kept for a person runs no expert, and a replay answers from the
            # records: nothing to recall for either.
            replayed = stored is not None and stored.reply is not None
            previous = (
                None if path is None else _outcomes.previous_turn(conn, path.messages, locked)
            )
            begun = TurnStart(
                message=message,
                created=created,
                path=path,
                handoff=held,
                answer=answer,
                handed_back=handed_back,
                previous_category=None if previous is None else previous.category,
                previous=previous,
                stored=stored,
                recalled=None if recall is None or answer is not None or replayed else recall(conn),
            )
            if also is not None:
                also(conn, begun)
            return begun

        begun = await _retrying_a_new_conversation(lambda: _taking(lease, work), client_message_id)
        if begun.path is not None and versions:  # Committed: the next turn may build on it.
            self._paths.keep(begun.path, versions[0])
        if begun.created:
            lease.asked = begun.message.id
        return begun

    async def _start_in_one_call(
        self,
        conversation_id: str,
        content: str,
        *,
        lease: TurnLease,
        user_id: str | None,
        client_message_id: str | None,
        token_count: int,
        handoff: HandoffPolicy | None,
        also: Callable[[Connection, TurnStart], None] | None,
        beside: asyncio.Task[Any] | None,
        profile: str | None,
    ) -> TurnStart:
        """`start_turn`'s usual case as one call of the database's function (the lease,
        the message under the leaf, its path and the turn before: `threads/_server_turn.py`),
        with what `beside` (the lookups on a second connection) read. The function is told
        the path this process kept (`PathCache.known`) and sends none back while that is
        still the path, as the general start reuses it (revision 0038).

        Raises:
            Fallback: not the usual start; nothing was written.
        """
        message = MessageRecord(
            id=new_id(),
            created_at=utcnow(),
            conversation_id=conversation_id,
            parent_id=None,  # The conversation's leaf, read by the function.
            role="user",
            content=content,
            token_count=token_count,
            client_message_id=client_message_id,
            model=None,
            prompt_versions=None,
        )

        known = self._paths.known(conversation_id)
        versions: list[int] = []  # The path version the function read (none: no path).

        def work(conn: Connection) -> tuple[int | None, TurnStart | None]:
            versions.clear()  # A retried call reads it again.
            token, done = _server_turn.start(
                conn,
                lease.claim(),
                message=message,
                user_id=user_id,
                profile=profile,
                check_handoff=handoff is not None,
                known=known,
            )
            if done is None:
                return token, None
            versions.append(done.version)
            begun = TurnStart(
                message=done.message,
                created=True,
                path=done.path,
                previous_category=None if done.previous is None else done.previous.category,
                previous=done.previous,
            )
            if also is not None:  # A usual start opens or closes no hand-off: no events.
                also(conn, begun)
            return token, begun

        begun = await lease.take_with(work, alone=True)
        assert begun is not None, "take_with returns what the first write returned"
        if begun.path is not None and versions:  # Committed: the next turn may build on it.
            self._paths.keep(begun.path, versions[0])
        lease.asked = begun.message.id
        if beside is not None:  # A lookup that failed finds nothing (as in a savepoint).
            begun = dataclasses.replace(begun, recalled=(await _settled(beside))[1])
        return begun

    async def add_assistant_message(
        self,
        parent_id: str,
        content: str,
        *,
        token_count: int = 0,
        model: str | None = None,
        prompt_versions: dict[str, str] | None = None,
    ) -> MessageRecord:
        """Append a reply under the user message `parent_id` and make it the active leaf.

        A second reply under the same user message is a sibling (a regeneration).

        Raises:
            MessageNotFound: no message `parent_id`.
            InvalidInput: `parent_id` is not a user message, or the text cannot be stored.
        """
        check_id(parent_id, "parent_id")
        check_text(content, "content")

        def work(conn: Connection) -> MessageRecord:
            return _writes.add_assistant(
                conn,
                parent_id,
                content=content,
                token_count=token_count,
                model=model,
                prompt_versions=prompt_versions,
            )

        return await run_sync_tx(self.engine, work)

    def stage_reply(
        self,
        parent: MessageRecord,
        content: str,
        *,
        token_count: int = 0,
        model: str | None = None,
        prompt_versions: dict[str, str] | None = None,
    ) -> MessageRecord:
        """The reply to the user message `parent`, checked but not written (see `finish_turn`).

        Raises:
            InvalidInput: `parent` is not a user message, or the text cannot be stored.
        """
        check_text(content, "content")
        if parent.role != "user":
            raise InvalidInput(
                f"message {parent.id!r} is an assistant message; a reply goes under a "
                "user message (regenerate under the assistant message's parent)"
            )
        return MessageRecord(
            id=new_id(),
            created_at=utcnow(),
            conversation_id=parent.conversation_id,
            parent_id=parent.id,
            role="assistant",
            content=content,
            token_count=token_count,
            client_message_id=None,
            model=model,
            prompt_versions=prompt_versions,
        )

    async def save_outcome(
        self, outcome: TurnOutcome, *, lease: TurnLease | None = None, scrub: Scrub | None = None
    ) -> Opened | None:
        """Store what a turn decided, durably, before its reply is produced.

        Called after the handler ran and before the response expert is called: a retry of
        the turn then reuses the outcome (`turn_record`) and never runs the handler again.
        Storing it again for the same question changes only its usage, models, sources and
        flow, and its hand-off when it had none (a later request of a message with several).
        With `lease`, the write is fenced by it (see `finish_turn`). An outcome with
        `handoff` opens the hand-off in this transaction, the first time the stored outcome
        carries it; returns it when this call opened it. `scrub`
        (a turn with ruled values) keeps their digests and rewrites the user message here.

        Raises:
            LeaseLost: `lease` was taken over meanwhile; nothing was written.
        """

        if (
            lease is not None
            and outcome.handoff is None
            and scrub is None
            and self.engine.dialect.name != "sqlite"
        ):
            fenced = lease

            def alone(conn: Connection) -> None:
                if not _outcomes.save_fenced(conn, outcome, fenced.fence_params()):
                    raise fenced.lost()

            # One statement, fence and write: its own transaction, no BEGIN or COMMIT.
            await run_sync_tx(self.engine, alone, alone=True)
            lease.outcome_of = outcome.user_message_id
            return None

        def work(conn: Connection) -> Opened | None:
            if lease is not None:
                lease.fence(conn)
            if scrub is not None:
                _ruled.scrub(conn, scrub)
            return _outcomes.save(conn, outcome)

        opened = await run_sync_tx(self.engine, work)
        if lease is not None:
            lease.outcome_of = outcome.user_message_id
        return opened

    async def answer_confirmation(
        self, user_message_id: str, confirmation: dict[str, Any], *, lease: TurnLease
    ) -> None:
        """Record the answer to the confirmation the turn `user_message_id` asked for
        (`TurnOutcome.confirmation`), fenced by the answering turn's `lease`: written before
        a confirmed handler runs, so no other branch of the conversation (an edit of the
        "yes") finds the request still pending and runs it again.

        Raises:
            LeaseLost: `lease` was taken over meanwhile; nothing was written.
        """

        def work(conn: Connection) -> None:
            lease.fence(conn)
            _outcomes.set_confirmation(conn, user_message_id, confirmation)

        await run_sync_tx(self.engine, work)

    async def record_spend(
        self,
        conversation_id: str,
        expert: str,
        usage: dict[str, dict[str, int]],
        models: dict[str, str],
    ) -> None:
        """Keep the usage of a background call (the summariser's: `threads/spend.py`)."""
        await run_sync_tx(
            self.engine,
            lambda conn: spend.record_spend(
                conn, conversation_id=conversation_id, expert=expert, usage=usage, models=models
            ),
        )

    async def spent_since(
        self, since: datetime, *, user_id: str | None, conversation_id: str | None
    ) -> list[Spent]:
        """The usage of the turns stored since `since`: of every conversation of `user_id`
        when given, else of `conversation_id` (`threads/spend.py`; a spend limit)."""
        return await self._read(
            lambda conn: spend.spent_since(
                conn, since=since, user_id=user_id, conversation_id=conversation_id
            )
        )

    async def turn_record(self, user_message_id: str) -> TurnRecord:
        """The newest real reply to `user_message_id` and the turn's stored outcome.

        Two reads by index (the message's parent, the outcome's key): the cost of a replay
        does not grow with the conversation. Failed-turn markers are not replies.
        """
        return await self._read(lambda conn: _outcomes.turn(conn, user_message_id))

    async def finish_turn(
        self,
        lease: TurnLease,
        reply: MessageRecord | None,
        *,
        outcome: TurnOutcome | None = None,
        also: Callable[[Connection, Opened | None], None] | None = None,
        release: bool = True,
        jobs: Sequence[JobSpec] = (),
        scrub: Scrub | None = None,
        closes: bool = False,
    ) -> FinishedTurn:
        """End a turn in one transaction: store `outcome` (or its usage; a `handoff` the
        stored outcome lacked opens the hand-off here too), store `reply` (from
        `stage_reply`) as the active leaf in place of any failed-turn marker, record `jobs`
        (what runs after the reply: `jobs.store`), run `also` (the turn's audit batch, given
        the hand-off this transaction opened), and give the lease back. Returns that hand-off
        and the recorded jobs' ids.

        This is the turn's last transaction, the one place its final writes happen. With
        `release=False` the lease stays held (for a last write elsewhere, then
        `lease.aclose()`). On failure nothing of it is written and the lease is still held.
        `scrub` (a turn with ruled values) keeps their digests and rewrites the user message.
        `closes` (the response expert judged that the customer closed the conversation)
        makes it `resolved` by the customer, unless it is resolved or handed off already.

        The transaction is fenced: it first checks that `lease` still holds with the token
        it was taken with (and row-locks it), so a turn whose lease expired and was taken
        over by another turn writes nothing.

        Raises:
            LeaseLost: the lease was taken over meanwhile; nothing was written.
        """

        if (
            release
            and reply is not None
            and scrub is None
            and not jobs
            and not closes
            and (outcome is None or (outcome.handoff is None and not outcome.resolves))
            and one_call_turns(self.engine)
        ):
            try:
                await self._finish_in_one_call(lease, reply, outcome, also)
                self._paths.extend(reply)
                return FinishedTurn()
            except _server_turn.Fallback:
                pass  # Not the usual finish: the general one below, which knows every case.

        opened: list[Opened | None] = [None]
        ids: list[_jobs.Deferred] = []
        resolved = [False]

        def work(conn: Connection) -> None:
            if not release:
                lease.fence(conn)  # `lease.release` checks the fence itself.
            if scrub is not None:
                _ruled.scrub(conn, scrub)
            if outcome is not None:
                stored = lease.outcome_of == outcome.user_message_id
                opened[0] = _outcomes.save(conn, outcome, stored=stored)
                if outcome.resolves:  # Only a resolving turn: a plain one writes nothing more.
                    resolved[0] = resolve(conn, outcome.conversation_id, "resolved", "handler")
            if closes and reply is not None:  # Only a closing turn: a plain one writes no more.
                cid = reply.conversation_id
                resolved[0] = resolve(conn, cid, "resolved", "customer", unless=("handed_off",))
            if reply is not None:
                _outcomes.write_reply(conn, reply, fresh=reply.parent_id == lease.asked)
            if jobs:  # Only a turn that starts background work: a plain one records none.
                ids[:] = _jobs.defer(conn, jobs)
            if also is not None:
                also(conn, opened[0])

        if release:
            await lease.release(work)
        else:
            await run_sync_tx(self.engine, work)
        if reply is not None:  # Committed: the next turn's path builds on it.
            self._paths.extend(reply)
        return FinishedTurn(opened=opened[0], jobs=ids, resolved=resolved[0])

    async def _finish_in_one_call(
        self,
        lease: TurnLease,
        reply: MessageRecord,
        outcome: TurnOutcome | None,
        also: Callable[[Connection, Opened | None], None] | None,
    ) -> None:
        """`finish_turn`'s usual case (no hand-off, resolution, jobs or scrub) as one call
        of the database's function, its audit batch made ahead (`_server_turn.AlsoAhead`).

        Raises:
            LeaseLost: the lease was taken over meanwhile; nothing was written.
            Fallback: not the usual finish (or the batch cannot be made ahead); nothing
                was written.
        """
        rows = None
        if also is not None:
            if not isinstance(also, _server_turn.AlsoAhead):
                raise _server_turn.Fallback("the audit batch needs the transaction")
            rows = also.ahead(None)  # The usual finish opens no hand-off.
            if rows is None:
                raise _server_turn.Fallback("the audit batch needs the database to be made")
        values = None if outcome is None else _outcomes.row_values(outcome)
        fence = lease.fence_params()

        def work(conn: Connection) -> bool:
            return _server_turn.finish(conn, fence, reply=reply, outcome=values, audit=rows)

        await lease.release_with(work)

    async def mark_failed(
        self, question: MessageRecord, safe_reply: str, *, lease: TurnLease | None = None
    ) -> MessageRecord | None:
        """Leave a failed turn's `safe_reply` under `question` (call it under the turn's lease).

        The marker is an assistant message of kind `failed`: the thread builder sends it as
        the assistant turn, so a next message never stacks two user turns in a row, and a
        retry with the same client message id supersedes it (`finish_turn`). Returns the
        marker, or `None` when the question already has a reply or a marker. With `lease`,
        the write is fenced by it: a turn that lost its lease leaves no marker.

        Raises:
            LeaseLost: `lease` was taken over meanwhile; nothing was written.
        """
        check_text(safe_reply, "safe_reply")

        def work(conn: Connection) -> MessageRecord | None:
            if lease is not None:
                lease.fence(conn)
            return _outcomes.mark_failed(conn, question, safe_reply)

        return await run_sync_tx(self.engine, work)

    async def set_active_leaf(self, conversation_id: str, message_id: str) -> str:
        """Switch the conversation to the branch through `message_id` (any of its messages).

        A message that has replies or edits below it is resolved to the newest leaf under
        it (the most recent branch through it), so the active leaf is always a leaf.
        Returns the leaf made active.

        Raises:
            MessageNotFound: no such message.
            MessageNotInConversation: the message belongs to another conversation.
        """

        def work(conn: Connection) -> str:
            return _writes.set_leaf(conn, conversation_id, message_id)

        return await run_sync_tx(self.engine, work)

    async def create_conversation(
        self, conversation_id: str, *, user_id: str | None, profile: str | None = None
    ) -> None:
        """Start an empty conversation owned by `user_id`, answered by `profile` (the
        service makes the id, so that no client can take one first).

        Raises:
            InvalidInput: an id that cannot be stored.
            StoreError: the id is taken already.
        """
        check_id(conversation_id, "conversation_id")
        if user_id is not None:
            check_id(user_id, "user_id")

        def work(conn: Connection) -> None:
            _writes.create_conversation(conn, conversation_id, user_id, profile)

        await run_sync_tx(self.engine, work)

    async def check_owner(self, conversation_id: str, user_id: str | None) -> None:
        """Refuse a caller who does not own the conversation, as if it did not exist.

        A conversation belongs to the `user_id` of its first message; `user_id=None`
        (single-user mode) reaches only conversations without an owner.

        Raises:
            ConversationNotFound: no such conversation, or another user's (the same error,
                so that a caller cannot probe for other users' conversations).
        """

        def work(conn: Connection) -> tuple[bool, str | None]:
            return _writes.owner_of(conn, conversation_id)

        exists, owner = await self._read(work)
        if not exists:
            raise _writes.not_found(conversation_id)
        _writes.check_owner(conversation_id, owner, user_id)

    async def profile_of(
        self, conversation_id: str, user_id: str | None, *, named: str | None = None
    ) -> str | None:
        """The profile recorded on the conversation (`None`: none recorded), owner checked,
        and the profile a caller `named` checked against it.

        Raises:
            ConversationNotFound: no such conversation, or another user's.
            ProfileMismatch: `named` is not the conversation's profile.
        """

        def work(conn: Connection) -> tuple[bool, str | None, str | None]:
            return _writes.owner_and_profile(conn, conversation_id)

        exists, owner, profile = await self._read(work)
        if not exists:
            raise _writes.not_found(conversation_id)
        _writes.check_owner(conversation_id, owner, user_id)
        _writes.check_profile(conversation_id, profile, named)
        return profile

    # Reads -------------------------------------------------------------------------------

    async def get(self, message_id: str) -> MessageRecord:
        """The message `message_id`.

        Raises:
            MessageNotFound: there is none.
        """

        return await self._read(lambda conn: _writes.get(conn, message_id))

    async def find_by_client_id(
        self, conversation_id: str, client_message_id: str
    ) -> MessageRecord | None:
        """The message the client sent with `client_message_id` here, if any."""

        return await self._read(
            lambda conn: _writes.by_client_id(conn, conversation_id, client_message_id)
        )

    async def replies_to(self, user_message_id: str) -> list[MessageRecord]:
        """The assistant messages under `user_message_id`, oldest first."""
        return await self._select(
            sa.and_(_msg.c.parent_id == user_message_id, _msg.c.role == "assistant")
        )

    async def children(self, message_id: str) -> list[MessageRecord]:
        """The messages directly under `message_id`, oldest first."""
        return await self._select(_msg.c.parent_id == message_id)

    async def messages(self, conversation_id: str) -> list[MessageRecord]:
        """Every message of the conversation (all branches), oldest first."""
        return await self._select(_msg.c.conversation_id == conversation_id)

    async def branches(self, conversation_id: str) -> list[MessageRecord]:
        """The leaves of the conversation's tree (one per branch), oldest first."""
        child = _msg.alias("child")
        has_child = sa.exists().where(child.c.parent_id == _msg.c.id)
        return await self._select(sa.and_(_msg.c.conversation_id == conversation_id, ~has_child))

    async def path(
        self, leaf_id: str, *, stop_after: str | None = None, last: int | None = None
    ) -> list[MessageRecord]:
        """The messages from the root to `leaf_id` along parent links, root first.

        One recursive query; never "sort by time".

        Args:
            leaf_id: The last message of the path.
            stop_after: An ancestor of `leaf_id`: only the messages strictly after it.
            last: At most this many messages (the newest ones).

        Raises:
            MessageNotFound: no message `leaf_id`.
            InvalidInput: `stop_after` is not an ancestor of `leaf_id`, or `last` < 1.
        """
        if last is not None and last < 1:
            raise InvalidInput(f"last must be at least 1, got {last}")

        def work(conn: Connection) -> list[MessageRecord]:
            rows = conn.execute(_writes.path_query(leaf_id, stop_after, last)).mappings().all()
            return [MessageRecord.from_row(row) for row in rows]

        if stop_after == leaf_id:
            await self.get(leaf_id)
            return []
        path = await self._read(work)
        if not path:
            raise MessageNotFound(f"no message {leaf_id!r}", message_id=leaf_id)
        truncated = last is not None and len(path) == last
        if stop_after is not None and not truncated and path[0].parent_id != stop_after:
            raise InvalidInput(f"message {stop_after!r} is not an ancestor of {leaf_id!r}")
        return path

    async def active_leaf(self, conversation_id: str) -> MessageRecord | None:
        """The conversation's active leaf, or `None` (no such conversation, or no message)."""

        def work(conn: Connection) -> MessageRecord | None:
            stmt = sa.select(_msg).join(_conv, _conv.c.active_leaf_id == _msg.c.id)
            row = conn.execute(stmt.where(_conv.c.id == conversation_id)).mappings()
            found = row.first()
            return None if found is None else MessageRecord.from_row(found)

        return await self._read(work)

    async def conversation(self, conversation_id: str) -> ConversationRecord | None:
        """The conversation's own row, or `None` when it does not exist."""

        def work(conn: Connection) -> ConversationRecord | None:
            stmt = sa.select(_conv).where(_conv.c.id == conversation_id)
            row = conn.execute(stmt).mappings().first()
            if row is None:
                return None
            return ConversationRecord(
                id=row["id"],
                user_id=row["user_id"],
                created_at=row["created_at"],
                metadata=row["metadata"] or {},
                active_leaf_id=row["active_leaf_id"],
                resolution=row["resolution"],
                resolved_at=row["resolved_at"],
                resolved_by=row["resolved_by"],
                profile=row["profile"],
            )

        return await self._read(work)

    def handler_store(self, namespace: str) -> HandlerStore:
        """The `everyone` scope of one category's (or shared namespace's) key-value data.

        What `HandlerContext.store` is: values every conversation of every user sees.
        """
        check_id(namespace, "namespace")
        return HandlerStore(self.engine, namespace)

    def handler_state(
        self, namespace: str, *, conversation_id: str, user_id: str | None
    ) -> HandlerState:
        """A handler's data in its three scopes for one turn (`HandlerContext.state`)."""
        return HandlerState(
            self.engine, namespace, conversation_id=conversation_id, user_id=user_id
        )

    async def delete_user_handler_state(self, user_id: str) -> int:
        """Delete every handler value in `user_id`'s scope, in every namespace (erasure).

        Erasing a user uses this: what handlers kept in `context.state.user` (and
        `.shared(name).user`) goes with the user. Values in the `everyone` scope are not
        tied to a user and stay; conversation-scoped values are handled by
        `erase_conversation_handler_state`.

        Returns:
            How many values were deleted (their rows are gone).
        """
        check_id(user_id, "user_id")
        return await run_sync_tx(self.engine, lambda conn: delete_user_state(conn, user_id))

    async def erase_conversation_handler_state(
        self, conversation_ids: Iterable[str], *, marker: Any = ERASED_MARKER
    ) -> int:
        """Replace the value of every handler key in these conversations' scope with `marker`.

        Erasing a user uses this on the user's conversations: the keys stay (a handler that
        checks a key, e.g. an idempotency key, still finds it and repeats nothing) and the
        values, which may hold personal data, are gone.

        Args:
            conversation_ids: The conversations whose `context.state.conversation` values
                (in every namespace) are erased.
            marker: Any JSON value left in their place (default `"[erased]"`).

        Returns:
            How many values were replaced.
        """
        ids = [check_id(c, "conversation_id") for c in conversation_ids]
        return await run_sync_tx(
            self.engine, lambda conn: erase_conversation_state(conn, ids, marker)
        )

    # Helpers -----------------------------------------------------------------------------

    async def _read(self, work: Callable[[Connection], T]) -> T:
        return await run_sync_tx(self.engine, work, readonly=True)

    async def _select(self, where: sa.ColumnElement[bool]) -> list[MessageRecord]:
        def work(conn: Connection) -> list[MessageRecord]:
            stmt = sa.select(_msg).where(where).order_by(_msg.c.created_at, _msg.c.id)
            return [MessageRecord.from_row(r) for r in conn.execute(stmt).mappings()]

        return await self._read(work)


def _beside(engine: AsyncEngine, read: Callable[[Connection], T]) -> asyncio.Task[T]:
    """`read` started now on a connection of its own, alone (autocommit: one round trip)."""
    return asyncio.ensure_future(run_sync_tx(engine, read, alone=True))


async def _settled(task: asyncio.Task[T]) -> tuple[bool, T | None]:
    """Wait for `task` (shielded: a read is never left half-done on a pooled connection);
    `(True, its result)`, or `(False, None)` when it failed (logged)."""
    with anyio.CancelScope(shield=True):
        await asyncio.wait([task])
    error = task.exception()
    if error is not None:
        _log.warning("turn.lookup_failed", error=type(error).__name__)
        return False, None
    return True, task.result()


async def _taking(lease: TurnLease, work: Callable[[Connection], T]) -> T:
    """Take `lease` with `work` as the transaction's body; returns what `work` returned."""
    result = await lease.take(work)
    assert result is not None, "take returns what the first write returned"
    return result


async def _retrying_a_new_conversation(
    run: Callable[[], Awaitable[T]], client_message_id: str | None
) -> T:
    try:
        return await run()
    except StoreError as e:
        # Two first messages racing on a new conversation: the loser re-reads.
        if isinstance(e.__cause__, IntegrityError) and client_message_id is not None:
            return await run()
        raise


def _check_user_message(
    conversation_id: str, content: str, user_id: str | None, client_message_id: str | None
) -> None:
    """Refuse ids and text that cannot be stored the same way on both databases."""
    check_id(conversation_id, "conversation_id")
    check_text(content, "content")
    if client_message_id is not None:
        check_id(client_message_id, "client_message_id")
    if user_id is not None:
        check_id(user_id, "user_id")
