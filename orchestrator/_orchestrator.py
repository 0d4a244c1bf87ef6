"""The `Orchestrator`: the public face of the turn engine.

It holds the settings, the wiring (models, prompts, experts) and what outlives a turn (the
store, the audit log, the compaction, the memory), and opens and closes them. Each verb
checks its input and calls one function: a turn is `orchestrator/turn.py` (new message,
edit, regeneration), a hand-off `orchestrator/handoff.py`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator, Iterable, Mapping
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, Literal, Self

import structlog

from frontdesk.audit.crypto import KeyProvider, master_key_from_env
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
from frontdesk.experts.providers.embeddings import Embedder
from frontdesk.memory import Memory, MemorySource
from frontdesk.orchestrator import _wiring, erasure, handoff, resolution, turn
from frontdesk.orchestrator._compaction import BackgroundCompaction, Compactor, summariser_expert
from frontdesk.orchestrator._input import DEFAULT_MAX_MESSAGE_CHARS, check_user_text
from frontdesk.orchestrator.config import (
    EXPERTS,
    ExpertSettings,
    ModelChoice,
    offline_by_default,
    resolve_models,
    warn_offline_once,
)
from frontdesk.orchestrator.handoff import Claim, Handoff
from frontdesk.orchestrator.jobs import (
    DEFAULT_CONCURRENCY,
    JOBS_MODES,
    DrainTimeout,
    JobKind,
    Jobs,
    JobsMode,
    PeriodicJob,
)
from frontdesk.orchestrator.knowledge import HybridRetriever, Knowledge, Library
from frontdesk.orchestrator.memory import CLOSE_TIMEOUT, Memories
from frontdesk.orchestrator.past_conversations import IDLE_AFTER, PastConversations
from frontdesk.orchestrator.reply import Reply
from frontdesk.orchestrator.stream import TurnEvent, stream_turn
from frontdesk.orchestrator.turn import Pipeline, app_record
from frontdesk.redaction import RedactionPolicy, Redactor, redactor_of
from frontdesk.threads.budget import Budget
from frontdesk.threads.builder import UserThread, build_thread
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.handoff import (
    DEFAULT_TIMEOUT_MESSAGE,
    DEFAULT_WAITING_MESSAGE,
    HandoffPolicy,
)
from frontdesk.threads.jobs import JobStore
from frontdesk.threads.knowledge import FullTextPassageRetriever, KnowledgeStore
from frontdesk.threads.memory import FullTextRetriever, MemoryStore, Retriever
from frontdesk.threads.resolution import Feedback
from frontdesk.threads.store import (
    DEFAULT_LEASE_TTL,
    ConversationRecord,
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
            (`triage`, `request`, `response`, `summariser`, `memory`, `default`) to either.
            `None` picks a provider whose API key is set, else the offline stand-in. The
            memory expert runs after each reply of a turn with a user; a test double for
            it answers `{"facts": []}` (docs/memory.md).
        store: A database URL or a `ConversationStore`.
        audit: `True` (the conversation database), a URL, an `AuditLog`, or `False`.
        audit_on_failure: `"raise"` fails the turn with a typed error when the audit log
            cannot be written; `"spool"` keeps the events in a local file for later.
        max_message_chars: Longest accepted user message.
        business_name: How the response expert names the business ("Sample Bank").
        shop_name: The old name of `business_name`, still accepted.
        handler_errors: What a handler's exception does: `"reply"` (the default) answers
            the apology and logs `handler.failed` with the traceback; `"raise"` (for
            development and tests) fails the turn with `HandlerFailed`, whose `__cause__`
            is the handler's exception (no reply stored; the user message stays).
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
        speculate: Start the request expert of the conversation's current category at the
            same time as triage, kept when triage agrees and cancelled (its cost audited)
            when it does not. Off, the two run one after the other.
        handoff_message: What a user is told (and what is stored as the answer) for each
            message sent while a person has the conversation (`hand_off`).
        handoff_timeout: Seconds a user may wait for a person's answer; past it the
            conversation is handed back to the bot with `handoff_timeout_message`. Checked
            lazily, by the conversation's next message and by `handoffs()`. `None`: never.
        handoff_timeout_message: The assistant message a timed-out hand-off leaves.
        audit_key: The master key that encrypts audit payloads per user (docs/privacy.md):
            32 bytes, base64 text, or a `KeyProvider` (a KMS); `None` reads
            `FRONTDESK_MASTER_KEY` (unset: payloads are stored in clear).
        redaction: What the clear-text views of this orchestrator's records show of
            personal data (`frontdesk.redaction.RedactionPolicy`, or a `Redactor`); the
            default redacts every built-in detector. It never changes what the models are
            sent or what is stored. `self.redactor` applies it, e.g.
            `redact_rows(await orch.audit_log.events(cid), orch.redactor)`.
        retriever: Finds each turn's memories (`threads.memory.Retriever`); by default
            the database's own full-text search. See docs/memory.md.
        memory: Read and write long-term memory in turns; `False`: no turn reads or
            learns any (`remember`, `memories`, `forget`... still work).
        knowledge: Look up the business's documents in turns (`Orchestrator.knowledge`);
            `False`: no turn reads any (adding and searching still work).
        embeddings: An embeddings endpoint (`experts.providers.embeddings.OpenAIEmbedder`)
            whose ranking is combined with the full text's; `None`: full text alone. See
            docs/knowledge.md.
        summarise_idle_after: How long a conversation goes without a message before its
            summary is kept as a memory of its user (`remember_idle_conversations`).
        jobs: Where the background jobs (learning, compaction, hand-off timeouts) run:
            `inline` in this process (the default), `worker` in `frontdesk worker`
            processes. Either way they are recorded with the reply (docs/jobs.md).
        job_concurrency: Jobs this process runs at once (`inline`).
        retention: Shred audit payloads older than an age as a periodic job, instead of
            cron (docs/privacy.md): a `RetentionPolicy`, or an age (`timedelta`, `"90d"`).
            It runs once per period (hourly by default) across every runner, wherever the
            jobs run (`jobs=`). `None` (the default): no periodic retention.
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
        business_name: str | None = None,
        shop_name: str | None = None,
        handler_errors: Literal["reply", "raise"] = "reply",
        prompts_dir: Path | str | None = None,
        settings: ExpertSettings | None = None,
        context: Mapping[str, Any] | None = None,
        lock_timeout: float = 30.0,
        lock_ttl: float = DEFAULT_LEASE_TTL,
        turn_deadline: float | None = 120.0,
        token_counter: TokenCounter | None = None,
        budgets: Mapping[str, Budget] | None = None,
        compaction: CompactionPolicy | None = None,
        speculate: bool = True,
        handoff_message: str = DEFAULT_WAITING_MESSAGE,
        handoff_timeout: float | None = None,
        handoff_timeout_message: str = DEFAULT_TIMEOUT_MESSAGE,
        audit_key: bytes | str | KeyProvider | None = None,
        redaction: RedactionPolicy | Redactor | None = None,
        retriever: Retriever | None = None,
        memory: bool = True,
        knowledge: bool = True,
        embeddings: Embedder | None = None,
        summarise_idle_after: timedelta = IDLE_AFTER,
        jobs: JobsMode = "inline",
        job_concurrency: int = DEFAULT_CONCURRENCY,
        retention: erasure.RetentionPolicy | timedelta | str | None = None,
        # Did it help (issue 45); grouped, to become Profile fields.
        assume_after: float | timedelta = resolution.ASSUME_AFTER,
        variants: resolution.Variants | None = None,
    ) -> None:
        self._pipeline: Pipeline | None = None
        self.use_jobs(jobs)
        self._audit_spec = audit
        self.use_retention(retention)
        if job_concurrency < 1:
            raise ConfigError(f"job_concurrency must be >= 1, got {job_concurrency}")
        self.job_concurrency = job_concurrency
        self.categories = check_registry(list(categories))
        self.app_spec: str | None = None
        """The `module:attr` this orchestrator was loaded from (`load_app`), recorded with
        each turn so that `frontdesk audit replay` can load the same app again."""
        self.offline_by_default = offline_by_default(model)
        """No model was named and no provider key is set: every expert is the offline
        stand-in (`frontdesk serve` refuses that unless told `--model offline`)."""
        self.models = resolve_models(model)
        # Models built here from spec strings hold HTTP clients this orchestrator must close;
        # Model instances passed in belong to the caller.
        self._owned_models = {
            id(m): m for m in self.models.values() if not _passed_in(m, model)
        }.values()
        self.prompts_dir = Path(prompts_dir) if prompts_dir is not None else None
        self.settings = settings or ExpertSettings()
        if business_name is not None and shop_name is not None and business_name != shop_name:
            raise ConfigError("pass business_name= (shop_name is its old name), not both")
        self.business_name = business_name or shop_name or "the business"
        if handler_errors not in ("reply", "raise"):
            raise ConfigError(f"handler_errors must be 'reply' or 'raise', not {handler_errors!r}")
        self.handler_errors: Literal["reply", "raise"] = handler_errors
        """Read when the orchestrator opens (set it before the first turn)."""
        self.max_message_chars = max_message_chars
        self.lock_timeout = lock_timeout
        self.lock_ttl = lock_ttl
        if turn_deadline is not None and turn_deadline <= 0:
            raise ConfigError(f"turn_deadline must be > 0 seconds or None, got {turn_deadline}")
        self.turn_deadline = turn_deadline
        if handoff_timeout is not None and handoff_timeout <= 0:
            raise ConfigError(f"handoff_timeout must be > 0 seconds or None, got {handoff_timeout}")
        for name, message in (
            ("handoff_message", handoff_message),
            ("handoff_timeout_message", handoff_timeout_message),
        ):
            if not isinstance(message, str) or not message.strip() or "\x00" in message:
                raise ConfigError(f"{name} must be a non-empty text without NUL characters")
        self.handoff_policy = HandoffPolicy(
            waiting_message=handoff_message,
            timeout=handoff_timeout,
            timeout_message=handoff_timeout_message,
        )
        self.speculate = speculate
        self.redactor: Redactor = redactor_of(redaction)
        self.token_counter: TokenCounter = token_counter or CalibratedCounter()
        self._context = dict(context or {})
        if isinstance(store, str):
            normalise_url(store)  # A bad URL is a ConfigError now, not on the first turn.
        self._store_spec = store
        self._audit_on_failure = audit_on_failure
        self._audit_key = audit_key
        self.budgets: Mapping[str, Budget] = dict(budgets or {})
        self.compaction_policy = compaction or CompactionPolicy()
        wiring = _wiring.Wiring(
            categories=list(self.categories.values()),
            models=self.models,
            settings=self.settings,
            prompts_dir=self.prompts_dir,
            business_name=self.business_name,
            counter=self.token_counter,
        )
        self._experts = wiring.build()
        self.assume_after = resolution.assume_seconds(assume_after)
        """Seconds after a bot answer with no customer message before the conversation is
        `assumed_resolved` (by the periodic job `conversations.assume_resolved`)."""
        self.variants = resolution.check_variants(variants)
        self._variant_experts = wiring.variants(self._experts, self.variants)
        self._memory_expert = wiring.memory_expert()
        wiring.check_budgets(self._experts, self.budgets)
        self._audit: AuditLog | None = None
        self._owns_store = isinstance(store, str)
        self._owns_audit = not isinstance(audit, AuditLog)
        self._open_lock = asyncio.Lock()
        self._compaction: BackgroundCompaction | None = None
        self._retriever = retriever
        self._memory_on = memory
        self._memories: Memories | None = None
        self._knowledge_on = knowledge
        self._embeddings = embeddings
        self._library: Library | None = None
        self._knowledge = Knowledge(self._opened_library)
        if not isinstance(summarise_idle_after, timedelta) or summarise_idle_after <= timedelta(0):
            raise ConfigError(
                f"summarise_idle_after must be a positive timedelta, got {summarise_idle_after!r}"
            )
        self.summarise_idle_after = summarise_idle_after
        self._past: PastConversations | None = None
        self._jobs: Jobs | None = None
        self._unfinished: set[asyncio.Task[Any]] = set()  # Turns whose stream reader left.

    # -- wiring -------------------------------------------------------------------------

    @property
    def audit_enabled(self) -> bool:
        """Whether this orchestrator keeps an audit log (`audit=False`: none)."""
        return self._audit_spec is not False

    @property
    def audit_encrypted(self) -> bool:
        """Whether audit payloads will be encrypted: a master key was given (`audit_key=`,
        or the `AuditLog` passed in has one) or `FRONTDESK_MASTER_KEY` is set."""
        spec = self._audit_spec
        if spec is False:
            return False
        if isinstance(spec, AuditLog):
            return spec.keys is not None
        return self._audit_key is not None or master_key_from_env() is not None

    def counter_for(self, expert: str) -> TokenCounter:
        """The token counter for one expert's model (calibrated per model when it can be)."""
        return _wiring.counter_for(self.token_counter, self.models[expert].name)

    @property
    def experts(self) -> _wiring.Experts:
        """The triage, request (per category) and response experts, as wired (for replay)."""
        return self._experts

    async def _open_audit(self, store: ConversationStore) -> AuditLog | None:
        """The audit log, with its master key; refused when its database needs another."""
        spec = self._audit_spec
        if spec is False:
            return None
        if isinstance(spec, AuditLog):
            spec.check_writable()
            return spec
        log = await AuditLog.open(
            store.engine if spec is True else spec,
            on_failure=self._audit_on_failure,
            master_key=self._audit_key,
        )
        try:
            log.check_writable()  # Encrypted database, no key: refuse now.
        except BaseException:
            await log.aclose()
            raise
        return log

    async def _open(self) -> Pipeline:
        """Open the store and audit log on first use (any process may do it)."""
        async with self._open_lock:
            if self._pipeline is not None:
                return self._pipeline
            if self.offline_by_default:  # No model named, no key: say so, once.
                warn_offline_once()
            store = self._store_spec
            if isinstance(store, str):
                store = await ConversationStore.open(store)
            try:
                self._audit = await self._open_audit(store)
            except BaseException:  # A wrong or missing master key: close what was opened.
                if self._owns_store:
                    await store.aclose()
                raise
            triage, requests, response = self._experts
            summariser = summariser_expert(
                self.models["summariser"],
                settings=self.settings.for_expert("summariser"),
                prompts_dir=self.prompts_dir,
            )
            self._compaction = compaction = BackgroundCompaction(
                compactor=Compactor(
                    store=store,
                    summariser=summariser,
                    policy=self.compaction_policy,
                    counter=self.token_counter,
                    audit=self._audit,
                )
            )
            knowledge_store = KnowledgeStore(store.engine)
            self._library = Library(
                store=knowledge_store,
                retriever=FullTextPassageRetriever(knowledge_store)
                if self._embeddings is None
                else HybridRetriever(store=knowledge_store, embedder=self._embeddings),
            )
            memory_store = MemoryStore(store.engine)
            self._past = PastConversations(
                store=store,
                memory=memory_store,
                summariser=summariser,
                audit=self._audit,
                idle_after=self.summarise_idle_after,
            )
            self._memories = Memories(
                store=memory_store,
                retriever=self._retriever or FullTextRetriever(memory_store),
                expert=self._memory_expert,
                audit=self._audit,
            )
            pipeline = Pipeline(
                app=app_record(self.app_spec, triage, requests, response),
                memory=self._memories if self._memory_on else None,
                store=store,
                audit=self._audit,
                deadline=self.turn_deadline,
                speculate=self.speculate,
                handler_errors=self.handler_errors,
                variants=self._variant_experts,
                categories=self.categories,
                triage=triage,
                requests=requests,
                response=response,
                context_extras=self._context,
                counters={e: self.counter_for(e) for e in EXPERTS},
                budgets=self.budgets,
                lease=partial(self._lease, store),
                handoff=self.handoff_policy,
                counter=self.token_counter,
                compaction=compaction,
                compaction_policy=self.compaction_policy,
                knowledge=self._library if self._knowledge_on else None,
                past=self._past if self._memory_on else None,
            )
            kinds, periodic = self._job_kinds(pipeline)
            jobs = Jobs(
                store=JobStore(store.engine),
                mode=self.jobs_mode,
                conninfo=_conninfo(store),
                kinds=kinds,
                periodic=periodic,
                concurrency=self.job_concurrency,
            )
            try:
                await jobs.start()
            except BaseException:  # Procrastinate missing or PostgreSQL away: close up.
                await self._close_opened(store)
                raise
            self._jobs = self._memories.jobs = jobs
            self._pipeline = dataclasses.replace(pipeline, jobs=jobs)
            return self._pipeline

    def _job_kinds(self, p: Pipeline) -> tuple[list[JobKind], list[PeriodicJob]]:
        """Every job kind and periodic job this orchestrator runs (docs/jobs.md, "Adding a
        job kind"): a new one is added here."""
        assert self._memories is not None and self._compaction is not None
        kinds = [
            self._memories.job_kind(p.store.get, p.store.conversation),
            self._compaction.job_kind(),
        ]
        periodic = []
        if self.handoff_policy.timeout is not None:
            periodic.append(handoff.timeouts_job(p, p.handoff, p.lease))
        periodic.append(resolution.assume_job(p, self.assume_after))
        kinds.append(erasure.erase_job_kind(p.store.engine, self._audit))
        if self.retention is not None and self._audit is not None:
            periodic.append(erasure.retention_job(p.store.engine, self._audit, self.retention))
        if p.past is not None:  # Idle conversations' summaries kept as memories (issue 24).
            past = p.past

            async def remember_idle() -> None:
                await past.remember_idle(limit=50)

            periodic.append(
                PeriodicJob(name="memory.idle_conversations", every=300, run=remember_idle)
            )
        return kinds, periodic

    async def _close_opened(self, store: ConversationStore) -> None:
        if self._audit is not None and self._owns_audit:
            await self._audit.aclose()
        self._audit = None
        if self._owns_store:
            await store.aclose()

    @property
    def knowledge(self) -> Knowledge:
        """The business's documents: `add`, `remove`, `search`, `sources`, usable before
        `open()` (docs/knowledge.md)."""
        return self._knowledge

    async def _opened_library(self) -> Library:
        await self._open()
        assert self._library is not None
        return self._library

    async def remember_idle_conversations(self, *, limit: int = 50) -> int:
        """Keep the summary of each conversation idle for `summarise_idle_after` as a memory
        of its user (those kept up to their newest message are skipped); how many were
        kept. The periodic job of docs/knowledge.md: run it on a schedule (the jobs runner)."""
        p = await self._open()
        if p.past is None:  # `memory=False`: nothing is learnt, summaries neither.
            return 0
        return await p.past.remember_idle(limit=limit)

    @property
    def store(self) -> ConversationStore:
        """The conversation store (after the first call that opened it)."""
        if self._pipeline is None:
            raise UserError("the store opens on first use; await orch.open() first")
        return self._pipeline.store

    @property
    def compaction(self) -> BackgroundCompaction:
        """The summariser's compaction of long threads (after the first call that opened it)."""
        if self._compaction is None:
            raise UserError("compaction starts with the store; await orch.open() first")
        return self._compaction

    @property
    def audit_log(self) -> AuditLog | None:
        """The audit log, or `None` when auditing is off or not yet opened."""
        return self._audit

    async def open(self) -> Self:
        """Open the store and audit log now rather than on the first turn."""
        await self._open()
        return self

    def use_store(self, store: str) -> None:
        """Point an orchestrator that has not opened yet at the store `store` (a URL).

        What `frontdesk serve --db URL` does to whatever `--app` built. The audit log
        follows the store unless it was given a database of its own.

        Raises:
            UserError: the orchestrator is open already.
            ConfigError: `store` is not a database URL frontdesk can use.
        """
        if self._pipeline is not None:
            raise UserError("use_store must be called before the orchestrator opens")
        normalise_url(store)
        self._store_spec = store
        self._owns_store = True

    def use_jobs(self, mode: JobsMode) -> None:
        """Run the background jobs `inline` (in this process) or in `worker` processes; what
        `frontdesk serve --jobs worker` does to whatever `--app` built.

        Raises:
            UserError: the orchestrator is open already.
            ConfigError: `mode` is neither.
        """
        if self._pipeline is not None:
            raise UserError("use_jobs must be called before the orchestrator opens")
        if mode not in JOBS_MODES:
            raise ConfigError(f"jobs must be 'inline' or 'worker', got {mode!r}")
        self.jobs_mode: JobsMode = mode

    def use_retention(self, retention: erasure.RetentionPolicy | timedelta | str | None) -> None:
        """Run retention as a periodic job (`retention=` of the constructor); what
        `frontdesk serve --retention 90d` and `frontdesk worker --retention 90d` do.

        Raises:
            UserError: the orchestrator is open already.
            ConfigError: not an age, or the audit log is off (`audit=False`: there is
                nothing for retention to shred).
        """
        if self._pipeline is not None:
            raise UserError("use_retention must be called before the orchestrator opens")
        policy = erasure.retention_policy(retention)
        if policy is not None and self._audit_spec is False:
            raise ConfigError(
                "retention shreds audit payloads, and audit=False keeps none; give an audit"
                " log or leave retention=None"
            )
        self.retention: erasure.RetentionPolicy | None = policy

    @property
    def jobs(self) -> Jobs:
        """The background jobs (after the first call that opened the store)."""
        if self._jobs is None:
            raise UserError("jobs start with the store; await orch.open() first")
        return self._jobs

    async def drain(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (public name)
        """Wait until the background work is done (tests, scripts, a graceful shutdown):
        turns whose stream reader left, then the jobs: with `jobs="inline"` every job
        waiting or running in the database (those found at start included), with
        `jobs="worker"` the jobs this orchestrator recorded. docs/jobs.md.

        Raises:
            DrainTimeout: `timeout` seconds passed with jobs left (a `TimeoutError`).
        """
        await self._open()
        async with asyncio.timeout(timeout):
            if self._unfinished:
                await asyncio.gather(*list(self._unfinished), return_exceptions=True)
        await self.jobs.drain(timeout)

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
        call (the same `Reply`, rebuilt from the stored records), or finishes a turn
        interrupted after the user message was stored, reusing the handler's stored outcome
        (the handler never runs twice once its outcome is stored).

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
            TurnFailed: the models or the database could not finish the turn; the user
                message is stored, with the safe reply as a `failed` marker under it.
        """
        text = check_user_text(text, max_chars=self.max_message_chars)
        self._check_question(text)
        p = await self._open()
        return await turn.handle(
            p, conversation_id, text, user_id=user_id, client_message_id=client_message_id
        )

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
        handle = partial(
            self.handle, conversation_id, text, user_id=user_id, client_message_id=client_message_id
        )
        return stream_turn(handle, finish_in_background=self.finish_in_background)

    async def edit(self, user_message_id: str, text: str, *, user_id: str | None = None) -> Reply:
        """Answer an edited user message: a sibling branch under the same parent.

        Raises:
            ConversationNotFound: no such message in a conversation of `user_id` (the same
                for a missing message and another user's, so neither can be probed).
        """
        text = check_user_text(text, max_chars=self.max_message_chars)
        self._check_question(text)
        return await turn.edit(await self._open(), user_message_id, text, user_id=user_id)

    async def regenerate(self, assistant_message_id: str, *, user_id: str | None = None) -> Reply:
        """Answer the same user message again: a sibling answer.

        The turn's stored outcome is reused: a regeneration writes the reply again and
        never runs the handler a second time (an order is not placed twice).

        Raises:
            ConversationNotFound: no such message in a conversation of `user_id`.
        """
        p = await self._open()
        return await turn.regenerate(p, assistant_message_id, user_id=user_id)

    # -- hand-off to a person -------------------------------------------------------------

    async def hand_off(self, conversation_id: str, reason: str) -> Handoff:
        """Hand the conversation to a person: until `hand_back`, each user message is
        stored with `handoff_message` as its answer and no model is called.

        A turn routed to a person (triage's `HUMAN`) calls this itself. Opening a hand-off
        that is open already returns it unchanged. Audited as `hand_off`.

        Raises:
            ConversationNotFound: no such conversation.
        """
        return await handoff.hand_off(await self._open(), conversation_id, reason)

    async def handoffs(self) -> list[Handoff]:
        """The conversations a person has, the longest-waiting user first.

        Hand-offs past `handoff_timeout` are handed back first (with the timeout message)
        and are not listed.
        """
        p = await self._open()
        return await handoff.handoffs(p, p.handoff, p.lease)

    async def claim(self, conversation_id: str, *, operator_id: str) -> Claim:
        """Give a handed-off conversation to one operator: until another claims it (a
        transfer), only they may answer it (`operator_reply` raises `HandoffClaimed` for
        anyone else). Audited as `handoff_claimed`; claiming one's own changes nothing.

        Raises:
            ConversationNotFound: no such conversation.
            NotHandedOff: no person has the conversation (`hand_off` first).
        """
        p = await self._open()
        return await handoff.claim(p, conversation_id, operator_id)

    async def operator_reply(self, conversation_id: str, text: str, *, operator_id: str) -> str:
        """Answer the user as a person: an assistant message authored `operator:<id>`.

        The thread sees it as an ordinary assistant turn. It takes the place of the
        waiting message at the end of the conversation (if there is one), else it follows
        the last assistant message (the thread joins consecutive assistant messages into one
        turn). Waits for a turn in flight on the conversation. Audited as `operator_reply`.

        Returns:
            The new message's id.

        Raises:
            InvalidUserText: empty or unstorable text.
            ConversationNotFound: no such conversation.
            NotHandedOff: no person has the conversation (`hand_off` first).
            HandoffClaimed: another operator has claimed it (`claim` it first).
            ConversationBusy: a turn held the conversation past `lock_timeout`.
        """
        text = check_user_text(text, max_chars=self.max_message_chars)
        p = await self._open()
        placed = await handoff.operator_reply(
            p, p.lease(conversation_id), conversation_id, text, operator_id
        )
        return placed.message.id

    async def hand_back(
        self, conversation_id: str, *, operator_id: str | None = None, resolved: bool = False
    ) -> None:
        """Give the conversation back to the bot: the next user message is answered by the
        experts, with the whole thread (operator turns included). Audited as `hand_back`.
        With `resolved`, the operator says the customer's matter is done: the conversation
        is `resolved` by `operator` (else it is `open` again).

        Raises:
            ConversationNotFound: no such conversation.
            NotHandedOff: no person has the conversation.
            ConversationBusy: a turn held the conversation past `lock_timeout`.
        """
        p = await self._open()
        await handoff.hand_back(
            p,
            p.lease(conversation_id),
            conversation_id,
            by="operator",
            operator_id=operator_id,
            resolved=resolved,
        )
        if p.past is not None:  # What was said with the person is kept for later (memory).
            p.past.schedule(conversation_id)

    async def conversation(
        self, conversation_id: str, *, user_id: str | None = None
    ) -> ConversationRecord:
        """The conversation's own row: its owner, its `resolution` (`open`, `resolved`,
        `assumed_resolved`, `handed_off`, `abandoned`), `resolved_at` and `resolved_by`.

        Raises:
            ConversationNotFound: no such conversation for `user_id`.
        """
        p = await self._open()
        await p.store.check_owner(conversation_id, user_id)
        found = await p.store.conversation(conversation_id)
        if found is None:
            raise ConversationNotFound(
                f"no conversation {conversation_id!r}", conversation_id=conversation_id
            )
        return found

    async def feedback(
        self,
        message_id: str,
        rating: int,
        *,
        user_id: str | None,
        comment: str | None = None,
    ) -> Feedback:
        """A customer's rating of one bot answer: 1-5 (thumbs up is 5, down is 1), with an
        optional comment. Stored with the message (a repeated rating replaces the last),
        audited as `feedback`, counted (`frontdesk_feedback`); a rating of 4 or 5 makes the
        conversation `resolved` by `customer`.

        Raises:
            ConversationNotFound: no such message in a conversation of `user_id`.
            UserError: the message is not a bot answer, the rating not 1-5, or the comment
                not storable text.
        """
        p = await self._open()
        message = await turn._owned_message(p, message_id, user_id)
        return await resolution.feedback(p, message, rating, user_id=user_id, comment=comment)

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

    async def erase_user(
        self, user_id: str, *, requested_by: str | None = None
    ) -> erasure.ErasureReport:
        """Erase everything stored about `user_id` (docs/privacy.md): transcript, summaries
        and outcomes get the erased marker, the user's audit data keys are destroyed, an
        `erased` event is audited. Idempotent: run it again after a crash to finish it.

        The request is recorded first, with a `privacy.erase` job, then erased here; if
        this process dies meanwhile, the job runner finishes it (docs/jobs.md).
        """
        p = await self._open()
        return await erasure.request_erasure(
            p.store.engine, self._audit, user_id, requested_by=requested_by
        )

    def finish_in_background(self, task: asyncio.Task[Any]) -> None:
        """Keep a turn running after its stream's reader left; `aclose` waits for it."""
        self._unfinished.add(task)
        task.add_done_callback(self._unfinished.discard)

    async def aclose(self) -> None:
        """Wait for background work (with `jobs="inline"`, the jobs this orchestrator
        recorded, for at most a minute; nothing when none is pending), then close what this
        orchestrator opened."""
        if self._unfinished:
            await asyncio.gather(*list(self._unfinished), return_exceptions=True)
        if self._past is not None:
            await self._past.wait()
        if self._jobs is not None:
            if self.jobs_mode == "inline":  # What it recorded (others' jobs are theirs;
                try:  # in `worker` mode the workers run them, durable meanwhile).
                    await self._jobs.drain(CLOSE_TIMEOUT, mine=True)
                except DrainTimeout as e:
                    log.warning("jobs.left_at_close", jobs=e.left)
            await self._jobs.aclose()
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
        self._compaction = None
        self._memories = None
        self._library = None
        self._past = None
        self._jobs = None

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- long-term memory (docs/memory.md) ---------------------------------------------

    @property
    def memory(self) -> Memories:
        """The users' long-term memory (after the first call that opened the store)."""
        if self._memories is None:
            raise UserError("memory opens with the store; await orch.open() first")
        return self._memories

    async def remember(
        self, user_id: str, text: str, key: str | None = None, *, source: MemorySource = "user"
    ) -> Memory:
        """Remember a fact about `user_id` from the very next turn on.

        Args:
            user_id: Whose fact it is.
            text: The fact, e.g. "Prefers replies in Hindi" (at most 500 characters).
            key: Facts with the same key supersede one another (the newest wins).
            source: Who states it: `user` (through the application), `operator`,
                `handler` or `memory_expert`.

        Raises:
            InvalidInput: empty or over-long text, an unknown source.
        """
        await self._open()
        return await self.memory.write(user_id, text, key=key, source=source)

    async def memories(self, user_id: str) -> list[Memory]:
        """The current facts about `user_id`, the most recently updated first."""
        await self._open()
        return await self.memory.store.current(user_id)

    async def correct(self, user_id: str, memory_id: str, text: str, *, by: str = "user") -> Memory:
        """Replace the text of one of the user's facts, from the very next turn on.

        Raises:
            MemoryNotFound: no current fact `memory_id` of `user_id`.
        """
        await self._open()
        memory = await self.memory.store.correct(user_id, memory_id, text)
        await self.memory.note_for_user(
            user_id, "memory_corrected", {"memory_id": memory_id, "by": by}
        )
        return memory

    async def forget(self, user_id: str, memory_id: str, *, by: str = "user") -> None:
        """Delete one of the user's facts (and the older versions it replaced): its text is
        gone from the database; the audit log records only that it was forgotten.

        `by` says who asked (`user`, `operator:ID`, `cli`), for the audit event; the
        event never holds the text (nor the user id: the chain is keyed by a digest).

        Raises:
            MemoryNotFound: no current fact `memory_id` of `user_id`.
        """
        await self._open()
        ids = await self.memory.store.forget(user_id, memory_id)
        await self.memory.note_for_user(
            user_id, "memory_forgotten", {"memory_ids": ids, "by": by, "all": False}
        )

    async def forget_all(self, user_id: str, *, by: str = "user") -> int:
        """Delete every fact about `user_id`; returns how many current facts were forgotten."""
        await self._open()
        count, ids = await self.memory.store.forget_all(user_id)
        if ids:
            await self.memory.note_for_user(
                user_id, "memory_forgotten", {"memory_ids": ids, "by": by, "all": True}
            )
        return count

    # -- machinery ----------------------------------------------------------------------

    def _lease(self, store: ConversationStore, conversation_id: str) -> TurnLease:
        """Serialise turns on one conversation across processes (a lease, not yet taken).

        The wait counts against the turn's deadline, so it is never longer than that. The
        settings are read at each call (`lock_timeout` may change while open).
        """
        wait = self.lock_timeout
        if self.turn_deadline is not None:
            wait = min(wait, self.turn_deadline)
        return store.turn_lease(conversation_id, timeout=wait, ttl=self.lock_ttl)

    def _check_question(self, text: str) -> None:
        """Refuse up front a question some expert could not be sent (the budgets' count)."""
        _wiring.check_question(text, {e: self.counter_for(e) for e in EXPERTS}, self.budgets)


def _conninfo(store: ConversationStore) -> str | None:
    """The libpq URL of a PostgreSQL store (Procrastinate's connection), else `None`."""
    url = store.engine.url
    if url.get_backend_name() != "postgresql":
        return None
    return url.set(drivername="postgresql").render_as_string(hide_password=False)
