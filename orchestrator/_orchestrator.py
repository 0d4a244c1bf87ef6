"""The `Orchestrator`: wiring (models, prompts, store, audit), locks and idempotency.

The data flow of one turn is in `orchestrator/turn.py`; this module decides which turn to
run (new message, retry of a known client message id, edit, regeneration), serialises
turns per conversation, and writes each turn's audit events in one batch.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, Awaitable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import structlog
from sqlalchemy import Connection

from frontdesk.audit.store import AuditLog
from frontdesk.db import normalise_url
from frontdesk.errors import (
    ConfigError,
    ConversationNotFound,
    MessageNotFound,
    MessageNotInConversation,
    UserError,
)
from frontdesk.experts import Category
from frontdesk.experts.category import check_registry
from frontdesk.experts.errors import ProviderQuotaExhausted
from frontdesk.orchestrator import _wiring
from frontdesk.orchestrator._input import DEFAULT_MAX_MESSAGE_CHARS, check_user_text
from frontdesk.orchestrator._recorder import TurnRecorder, recording
from frontdesk.orchestrator._staging import StagingStore
from frontdesk.orchestrator.config import EXPERTS, ExpertSettings, ModelChoice, resolve_models
from frontdesk.orchestrator.errors import TurnFailed
from frontdesk.orchestrator.reply import Reply
from frontdesk.orchestrator.stream import TurnEvent, stream_turn
from frontdesk.orchestrator.turn import Pipeline, Turn, run_turn
from frontdesk.threads.budget import Budget
from frontdesk.threads.builder import ThreadMessage, UserThread, build_thread, thread_since
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.store import (
    DEFAULT_LEASE_TTL,
    ConversationStore,
    MessageRecord,
    TurnLease,
)
from frontdesk.threads.tokens import CalibratedCounter, TokenCounter

log = structlog.get_logger("frontdesk.orchestrator")

DEFAULT_STORE = "sqlite:///frontdesk.db"


def _passed_in(model: object, choice: ModelChoice) -> bool:
    """Whether `model` is an instance the caller passed (rather than one built from a spec)."""
    if isinstance(choice, Mapping):
        return any(model is c for c in choice.values())
    return model is choice


class Orchestrator:
    """Runs customer-service turns through the experts over one shared user thread.

    Args:
        categories: The registered categories (`experts.Category`).
        model: A spec (`"anthropic:claude-sonnet-4-5"`, `"openai:gpt-4.1-mini"`,
            `"openai:NAME@BASE_URL"`, `"offline"`), a `Model`, or a map from expert name
            (`triage`, `request`, `response`, `summariser`, `default`) to either. `None`
            picks a provider whose API key is set, else the offline stand-in.
        store: A database URL or a `ConversationStore`.
        audit: `True` (the conversation database), a URL, an `AuditLog`, or `False`.
        audit_on_failure: `"raise"` fails the turn with a typed error when the audit log
            cannot be written; `"spool"` keeps the events in a local file for later.
        max_message_chars: Longest accepted user message.
        shop_name: How the response expert names the business.
        prompts_dir: A folder whose `<name>.md` files replace the built-in prompts.
        settings: Per-expert model settings.
        context: Extra data handed to every handler in `HandlerContext.extras`.
        lock_timeout: Seconds a turn waits for another turn on the same conversation.
        lock_ttl: Seconds after which the lock of a crashed process expires (a running
            turn renews its lock every third of it, so a slow handler keeps it).
        turn_deadline: Seconds a turn's expert calls may take in all (retries included);
            past it the turn fails with `TurnFailed(stage="deadline")`, the message kept.
        budgets: Token budgets per expert (`threads.Budget`), replacing the defaults.
        compaction: When and how the summariser compacts long threads.
        token_counter: Counts message tokens (a fast local estimate by default).
    """

    def __init__(
        self,
        categories: Iterable[Category],
        *,
        model: ModelChoice = None,
        store: str | ConversationStore = DEFAULT_STORE,
        audit: bool | str | AuditLog = True,
        audit_on_failure: Literal["raise", "spool"] = "raise",
        max_message_chars: int = DEFAULT_MAX_MESSAGE_CHARS,
        shop_name: str = "the shop",
        prompts_dir: Path | str | None = None,
        settings: ExpertSettings | None = None,
        context: Mapping[str, Any] | None = None,
        lock_timeout: float = 30.0,
        lock_ttl: float = DEFAULT_LEASE_TTL,
        turn_deadline: float | None = 120.0,
        token_counter: TokenCounter | None = None,
        budgets: Mapping[str, Budget] | None = None,
        compaction: CompactionPolicy | None = None,
    ) -> None:
        self.categories = check_registry(list(categories))
        self.models = resolve_models(model)
        # Models built here from spec strings hold HTTP clients this orchestrator must close;
        # Model instances passed in belong to the caller.
        self._owned_models = {
            id(m): m for m in self.models.values() if not _passed_in(m, model)
        }.values()
        self.prompts_dir = Path(prompts_dir) if prompts_dir is not None else None
        self.settings = settings or ExpertSettings()
        self.shop_name = shop_name
        self.max_message_chars = max_message_chars
        self.lock_timeout = lock_timeout
        self.lock_ttl = lock_ttl
        if turn_deadline is not None and turn_deadline <= 0:
            raise ConfigError(f"turn_deadline must be > 0 seconds or None, got {turn_deadline}")
        self.turn_deadline = turn_deadline
        self.token_counter: TokenCounter = token_counter or CalibratedCounter()
        self._context = dict(context or {})
        if isinstance(store, str):
            normalise_url(store)  # A bad URL is a ConfigError now, not on the first turn.
        self._store_spec = store
        self._audit_spec = audit
        self._audit_on_failure = audit_on_failure
        self.budgets: Mapping[str, Budget] = dict(budgets or {})
        self.compaction_policy = compaction or CompactionPolicy()
        wiring = _wiring.Wiring(
            categories=list(self.categories.values()),
            models=self.models,
            settings=self.settings,
            prompts_dir=self.prompts_dir,
            shop_name=shop_name,
            counter=self.token_counter,
        )
        self._experts = wiring.build()
        wiring.check_budgets(self._experts, self.budgets)
        self._pipeline: Pipeline | None = None
        self._audit: AuditLog | None = None
        self._owns_store = isinstance(store, str)
        self._owns_audit = not isinstance(audit, AuditLog)
        self._open_lock = asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self._compacting: set[str] = set()
        """Conversations this process is compacting now (the DB lease covers other processes)."""

    # -- wiring -------------------------------------------------------------------------

    def counter_for(self, expert: str) -> TokenCounter:
        """The token counter for one expert's model (calibrated per model when it can be)."""
        return _wiring.counter_for(self.token_counter, self.models[expert].name)

    @property
    def experts(self) -> _wiring.Experts:
        """The triage, request (per category) and response experts, as wired (for replay)."""
        return self._experts

    async def _open(self) -> Pipeline:
        """Open the store and audit log on first use (any process may do it)."""
        async with self._open_lock:
            if self._pipeline is not None:
                return self._pipeline
            store = self._store_spec
            if isinstance(store, str):
                store = await ConversationStore.open(store)
            if self._audit_spec is True:
                self._audit = await AuditLog.open(store.engine, on_failure=self._audit_on_failure)
            elif isinstance(self._audit_spec, str):
                self._audit = await AuditLog.open(
                    self._audit_spec, on_failure=self._audit_on_failure
                )
            elif isinstance(self._audit_spec, AuditLog):
                self._audit = self._audit_spec
            triage, requests, response = self._experts
            self._pipeline = Pipeline(
                store=store,
                categories=self.categories,
                triage=triage,
                requests=requests,
                response=response,
                context_extras=self._context,
                counters={e: self.counter_for(e) for e in EXPERTS},
                budgets=self.budgets,
            )
            return self._pipeline

    @property
    def store(self) -> ConversationStore:
        """The conversation store (after the first call that opened it)."""
        if self._pipeline is None:
            raise UserError("the store opens on first use; await orch.open() first")
        return self._pipeline.store

    @property
    def audit_log(self) -> AuditLog | None:
        """The audit log, or `None` when auditing is off or not yet opened."""
        return self._audit

    async def open(self) -> Orchestrator:
        """Open the store and audit log now rather than on the first turn."""
        await self._open()
        return self

    # -- public turns -------------------------------------------------------------------

    async def handle(
        self,
        conversation_id: str,
        text: str,
        *,
        user_id: str | None = None,
        client_message_id: str | None = None,
    ) -> Reply:
        """Answer one user message.

        Idempotent per `client_message_id`: a retry returns the stored reply without a model
        call, or finishes a turn interrupted after the user message was stored.

        Args:
            conversation_id: The conversation; created on its first message.
            text: What the user wrote.
            user_id: Who is writing. A new conversation belongs to the `user_id` of its
                first message; later calls must name the same user. `None` is single-user
                mode: it starts and reaches only conversations without an owner.
            client_message_id: The client's id for this message (idempotency key).

        Raises:
            InvalidUserText: before anything is stored or sent (`InputTooLarge` names the
                character limit or the expert whose question allowance it is over).
            ConversationNotFound: the conversation belongs to another user (checked in the
                transaction that would store the message, before any model call).
            IdempotencyConflict: the id was used with other text; nothing is written.
            ConversationBusy: another turn held the conversation past `lock_timeout` (or
                past `turn_deadline`, which the wait counts against).
            LeaseLost: the turn stalled past `lock_ttl` and another turn took the
                conversation over; none of this turn's last writes landed.
            TurnFailed: the models could not answer; the user message is stored.
        """
        text = check_user_text(text, max_chars=self.max_message_chars)
        self._check_question(text)
        p = await self._open()
        lease = self._lease(p, conversation_id)
        try:
            # One transaction takes the lease, stores the message and reads the thread.
            start = await p.store.start_turn(
                conversation_id,
                text,
                user_id=user_id,
                client_message_id=client_message_id,
                token_count=self.token_counter.count(text),
                lease=lease,
            )
            user_message = start.message
            if not start.created:
                replies = await p.store.replies_to(user_message.id)
                if replies:
                    return await self._replayed(user_message, replies[-1])
                log.info("turn.resume", conversation_id=conversation_id, turn=user_message.id)
            return await self._answer(p, user_message, user_id, lease, thread_since(start.path))
        finally:
            await lease.aclose()

    def stream(
        self,
        conversation_id: str,
        text: str,
        *,
        user_id: str | None = None,
        client_message_id: str | None = None,
    ) -> AsyncGenerator[TurnEvent, None]:
        """`handle`, as events: `routed`, `extracted`, `delta`..., then `done` or `failed`.

        See `frontdesk.orchestrator.stream` for the order, the faults, and what happens
        when the consumer stops reading (the turn still finishes and stores its reply).
        """
        return stream_turn(
            self, conversation_id, text, user_id=user_id, client_message_id=client_message_id
        )

    async def edit(self, user_message_id: str, text: str, *, user_id: str | None = None) -> Reply:
        """Answer an edited user message: a sibling branch under the same parent.

        Raises:
            ConversationNotFound: no such message in a conversation of `user_id` (the same
                for a missing message and another user's, so neither can be probed).
        """
        text = check_user_text(text, max_chars=self.max_message_chars)
        self._check_question(text)
        p = await self._open()
        original = await self._owned_message(p, user_message_id, user_id)
        if original.role != "user":
            raise UserError(f"message {user_message_id} is an assistant message; edit a user one")
        lease = self._lease(p, original.conversation_id)
        try:
            start = await p.store.start_turn(
                original.conversation_id,
                text,
                user_id=user_id,
                parent_id=original.parent_id,
                token_count=self.token_counter.count(text),
                lease=lease,
            )
            return await self._answer(p, start.message, user_id, lease, thread_since(start.path))
        finally:
            await lease.aclose()

    async def regenerate(self, assistant_message_id: str, *, user_id: str | None = None) -> Reply:
        """Answer the same user message again: a sibling answer.

        Raises:
            ConversationNotFound: no such message in a conversation of `user_id`.
        """
        p = await self._open()
        answer = await self._owned_message(p, assistant_message_id, user_id)
        if answer.role != "assistant" or answer.parent_id is None:
            raise UserError(f"message {assistant_message_id} is not an assistant message")
        question = await p.store.get(answer.parent_id)
        lease = self._lease(p, answer.conversation_id)
        try:
            await lease.take()
            thread = await build_thread(p.store, question.id)
            return await self._answer(p, question, user_id, lease, thread)
        finally:
            await lease.aclose()

    async def user_thread(self, conversation_id: str, *, user_id: str | None = None) -> UserThread:
        """What the experts will be sent next for this conversation (summary included).

        Raises:
            ConversationNotFound: no such conversation for `user_id`.
        """
        p = await self._open()
        await p.store.check_owner(conversation_id, user_id)
        leaf = await p.store.active_leaf(conversation_id)
        if leaf is None:
            return UserThread()
        return await build_thread(p.store, leaf.id)

    async def transcript(
        self, conversation_id: str, *, user_id: str | None = None
    ) -> list[MessageRecord]:
        """Every message of the active path, root first (never compacted).

        Raises:
            ConversationNotFound: no such conversation for `user_id`.
        """
        p = await self._open()
        await p.store.check_owner(conversation_id, user_id)
        leaf = await p.store.active_leaf(conversation_id)
        return [] if leaf is None else await p.store.path(leaf.id)

    async def branches(
        self, conversation_id: str, *, user_id: str | None = None
    ) -> list[MessageRecord]:
        """The leaves of the conversation's tree: one per branch (edits, regenerations).

        Raises:
            ConversationNotFound: no such conversation for `user_id`.
        """
        p = await self._open()
        await p.store.check_owner(conversation_id, user_id)
        return await p.store.branches(conversation_id)

    async def switch_branch(
        self, conversation_id: str, message_id: str, *, user_id: str | None = None
    ) -> list[MessageRecord]:
        """Make the path through `message_id` the active one; returns that transcript.

        `message_id` may be any message of the conversation: one with replies or edits
        below it is resolved to the newest leaf under it (the transcript then ends there),
        so the next message always follows a whole exchange.

        Raises:
            ConversationNotFound: no such conversation for `user_id`.
            MessageNotFound: no such message in this conversation (the same for a message
                of another conversation, so that message ids cannot be probed).
        """
        p = await self._open()
        await p.store.check_owner(conversation_id, user_id)
        try:
            await p.store.set_active_leaf(conversation_id, message_id)
        except MessageNotInConversation:  # Said as for a missing one: no probing of ids.
            raise MessageNotFound(
                f"no message {message_id!r} in conversation {conversation_id!r}",
                message_id=message_id,
            ) from None
        return await self.transcript(conversation_id, user_id=user_id)

    async def aclose(self) -> None:
        """Wait for background work, then close what this orchestrator opened."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._audit is not None and self._owns_audit:
            await self._audit.aclose()
        if self._pipeline is not None and self._owns_store:
            await self._pipeline.store.aclose()
        for model in self._owned_models:
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()
        self._pipeline = None
        self._audit = None

    async def __aenter__(self) -> Orchestrator:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- machinery ----------------------------------------------------------------------

    def _lease(self, p: Pipeline, conversation_id: str) -> TurnLease:
        """Serialise turns on one conversation across processes (a lease, not yet taken).

        The wait counts against the turn's deadline, so it is never longer than that.
        """
        wait = self.lock_timeout
        if self.turn_deadline is not None:
            wait = min(wait, self.turn_deadline)
        return p.store.turn_lease(conversation_id, timeout=wait, ttl=self.lock_ttl)

    def _check_question(self, text: str) -> None:
        """Refuse up front a question some expert could not be sent (the budgets' count)."""
        _wiring.check_question(text, {e: self.counter_for(e) for e in EXPERTS}, self.budgets)

    async def _owned_message(
        self, p: Pipeline, message_id: str, user_id: str | None
    ) -> MessageRecord:
        """The message `message_id` if it is in a conversation of `user_id`.

        Raises:
            ConversationNotFound: the same for a missing message and another user's.
        """
        try:
            message = await p.store.get(message_id)
            await p.store.check_owner(message.conversation_id, user_id)
        except (MessageNotFound, ConversationNotFound):
            raise ConversationNotFound(
                f"no message {message_id!r} in a conversation of this user; check the message "
                "id and the user_id the conversation was started with",
                conversation_id=None,
                message_id=message_id,
            ) from None
        return message

    async def _answer(
        self,
        p: Pipeline,
        user_message: MessageRecord,
        user_id: str | None,
        lease: TurnLease,
        thread: UserThread,
    ) -> Reply:
        """Run the pipeline for a stored user message (under the held `lease`), then store
        the reply, audit the turn in one batch and give the lease back."""
        recorder = TurnRecorder(turn_id=user_message.id)
        recorder.note(
            "turn_started",
            user_message_id=user_message.id,
            client_message_id=user_message.client_message_id,
            parent_id=user_message.parent_id,
            text=user_message.content,
            user_id=user_id,
        )
        turn = Turn(
            conversation_id=user_message.conversation_id,
            user_id=user_id,
            user_message=user_message,
            thread=thread,
            recorder=recorder,
        )
        staging = StagingStore(p.store, user_message)
        try:
            with recording(recorder):
                reply = await self._within_deadline(
                    run_turn(dataclasses.replace(p, store=staging), turn),
                    user_message,
                    since=lease.started,
                )
        except BaseException as e:
            await self._fail(user_message.conversation_id, recorder, e)
            raise
        await self._finish(p, lease, staging.staged, user_message.conversation_id, recorder)
        # The policy is checked on the thread already in memory, so a turn under the
        # threshold costs no database read; the background task checks again under its lease.
        after = [*turn.thread.messages, ThreadMessage(role="assistant", content=reply.text)]
        if self.compaction_policy.plan(after, self.token_counter) is not None:
            self._after_reply(user_message.conversation_id, reply.message_id)
        return reply

    async def _within_deadline(
        self, turn: Awaitable[Reply], user_message: MessageRecord, *, since: float
    ) -> Reply:
        """Run the turn's expert calls under the turn deadline (a provider that hangs or a
        long retry-after never holds the caller, or the conversation's lease, past it).

        The deadline runs from `since` (`time.monotonic()`, when the turn began waiting for
        its lease), so the lease wait counts against it."""
        remaining = None
        if self.turn_deadline is not None:
            remaining = self.turn_deadline - (time.monotonic() - since)
        try:
            async with asyncio.timeout(remaining):
                return await turn
        except TimeoutError as e:
            raise TurnFailed(
                f"the turn took longer than its {self.turn_deadline} s deadline",
                user_message_id=user_message.id,
                stage="deadline",
            ) from e

    async def _finish(
        self,
        p: Pipeline,
        lease: TurnLease,
        reply: MessageRecord | None,
        conversation_id: str,
        recorder: TurnRecorder,
    ) -> None:
        """Store the reply, write the audit batch and give the lease back: one transaction
        when the audit log shares the conversation database, else reply, audit, release."""
        audit = self._audit
        if audit is None:
            await p.store.finish_turn(lease, reply)
            return
        if audit.joinable(p.store.engine):

            def write_batch(conn: Connection) -> None:
                audit.append_sync(conn, conversation_id, recorder.events)

            try:
                await p.store.finish_turn(lease, reply, also=write_batch)
                return
            except Exception as e:  # Nothing was written: take the separate path below.
                log.warning("turn.joint_write_failed", conversation_id=conversation_id, error=e)
        try:
            await p.store.finish_turn(lease, reply, release=False)
        except BaseException as e:
            await self._fail(conversation_id, recorder, e)
            raise
        await self._write_audit(conversation_id, recorder)

    async def _fail(
        self, conversation_id: str, recorder: TurnRecorder, error: BaseException
    ) -> None:
        """Audit a failing turn (its own error stays the one the caller sees)."""
        stage = error.stage if isinstance(error, TurnFailed) else "orchestrator"
        recorder.note("turn_failed", stage=stage, error=f"{type(error).__name__}: {error}")
        if isinstance(error.__cause__, ProviderQuotaExhausted):
            # Money ran out: every turn will fail until someone tops up, so say it loudly.
            cause = error.__cause__
            log.error("alert.provider_quota_exhausted", model=cause.model, stage=stage)
        await self._write_audit(conversation_id, recorder, failing=True)

    async def _write_audit(
        self, conversation_id: str, recorder: TurnRecorder, *, failing: bool = False
    ) -> None:
        if self._audit is None:
            return
        try:
            await self._audit.append(conversation_id, recorder.events)
        except Exception:
            if not failing:
                raise
            # The turn is already failing; its own error is the one the caller must see.
            log.exception("audit.write_failed_during_failed_turn", conversation_id=conversation_id)

    async def _replayed(self, user_message: MessageRecord, answer: MessageRecord) -> Reply:
        """The stored reply to a retried client message id, with its recorded route."""
        category, request, missing = None, None, None
        if self._audit is not None:
            for event in await self._audit.events(user_message.conversation_id):
                if event.turn_id != user_message.id:
                    continue
                if event.kind == "triage":
                    category = event.payload.get("category")
                elif event.kind == "request":
                    request, missing = self._recorded_request(event.payload)
        return Reply(
            text=answer.content,
            category=category,
            request=request,
            need_more_info=missing,
            message_id=answer.id,
            user_message_id=user_message.id,
            conversation_id=user_message.conversation_id,
            replayed=True,
        )

    def _recorded_request(self, payload: Mapping[str, Any]) -> tuple[Any, Any]:
        from frontdesk.experts import NeedMoreInfo

        category = self.categories.get(str(payload.get("category")))
        request = payload.get("request")
        missing = payload.get("need_more_info")
        parsed = None
        if category is not None and category.request is not None and request is not None:
            parsed = category.request.model_validate(request)
        return parsed, NeedMoreInfo.model_validate(missing) if missing else None

    def _after_reply(self, conversation_id: str, leaf_id: str) -> None:
        """Hook: background work after the reply is returned (compaction, issue 5)."""
        from frontdesk.orchestrator._compaction import schedule_compaction

        schedule_compaction(self, conversation_id, leaf_id)
