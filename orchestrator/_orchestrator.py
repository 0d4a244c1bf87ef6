"""The `Orchestrator`: the public face of the turn engine.

It holds the settings, the wiring (models, prompts, experts) and what outlives a turn (the
store, the audit log, the compaction, the memory), and opens and closes them. Each verb
checks its input and calls one function: a turn is `orchestrator/turn.py` (new message,
edit, regeneration), a hand-off `orchestrator/handoff.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Iterable, Mapping
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

import structlog

from frontdesk.audit.crypto import master_key_from_env
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
from frontdesk.experts.language import warm_in_background as warm_language_detector
from frontdesk.experts.providers import Model
from frontdesk.jobs.runner import DrainTimeout, JobKind, Jobs, JobsMode, PeriodicJob
from frontdesk.jobs.store import JobStore
from frontdesk.memory import Memory, MemorySource, MemoryTrust
from frontdesk.memory_policy import MemoryPolicy
from frontdesk.orchestrator import _wiring, erasure, handoff, resolution, turn
from frontdesk.orchestrator._compaction import BackgroundCompaction, Compactor, summariser_expert
from frontdesk.orchestrator._input import check_user_text
from frontdesk.orchestrator._pipeline import Pipeline
from frontdesk.orchestrator._router import Router
from frontdesk.orchestrator.config import (
    ExpertSettings,
    warn_offline_once,
    warn_without_examples,
)
from frontdesk.orchestrator.erasure import Privacy
from frontdesk.orchestrator.handoff import Claim, Handoff, Handoffs
from frontdesk.orchestrator.knowledge import HybridRetriever, Knowledge, Library
from frontdesk.orchestrator.memory import CLOSE_TIMEOUT, LongTermMemory, Memories
from frontdesk.orchestrator.past_conversations import PastConversations
from frontdesk.orchestrator.profile import (
    DEFAULT_PROFILE,
    AuditSettings,
    FlatSettings,
    JobSettings,
    Profile,
    Timeouts,
    check_profile_name,
    flat_settings,
)
from frontdesk.orchestrator.reply import Reply
from frontdesk.orchestrator.ruled_values import Secrets
from frontdesk.orchestrator.stream import TurnEvent, stream_turn
from frontdesk.orchestrator.turn import app_record
from frontdesk.redaction import Redactor, field_rules, redactor_of
from frontdesk.threads.budget import Budget
from frontdesk.threads.builder import UserThread, build_thread
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.handoff import HandoffPolicy
from frontdesk.threads.knowledge import FullTextPassageRetriever, KnowledgeStore
from frontdesk.threads.memory import FullTextRetriever, MemoryStore
from frontdesk.threads.resolution import Feedback
from frontdesk.threads.routing import CategoryVectors
from frontdesk.threads.store import (
    ConversationRecord,
    ConversationStore,
    MessageRecord,
    TurnLease,
)
from frontdesk.threads.tokens import TokenCounter

log = structlog.get_logger("frontdesk.orchestrator")

DEFAULT_STORE = "sqlite:///frontdesk.db"


class Orchestrator:
    """Runs customer-service turns through the experts over one shared user thread.

    What a business is (its categories, models, prompts and policies) is a `Profile`;
    where it runs is the rest. The short form passes the profile's fields flat:
    `Orchestrator(categories, model=..., business_name=...)` builds `Profile(categories,
    model=..., business_name=...)` (docs/profiles.md lists where each keyword now lives; an
    unknown one is a `TypeError` that says so).

    Args:
        categories: The short form's categories (with the profile's fields as keywords).
        profile: The one business this orchestrator answers for (its name: `default`).
        profiles: Several businesses on one deployment, by name: each conversation is
            answered by the one named on its first message (`handle(..., profile=NAME)`;
            the first when none is named) and records it.
        store: A database URL or a `ConversationStore`.
        audit: `AuditSettings`, or its `log` alone: `True` (the conversation database),
            a URL, an `AuditLog`, or `False`.
        jobs: `JobSettings`, or its `mode` alone: `inline` (this process) or `worker`.
        timeouts: How long a turn may wait for its conversation and run (`Timeouts`).
        **flat: The short form: `Profile` fields, and the older flat names (`prompts_dir`,
            `shop_name`, `handoff_message`, `handoff_timeout`, `handoff_timeout_message`,
            `lock_timeout`, `lock_ttl`, `turn_deadline`, `audit_on_failure`, `audit_key`,
            `retention`, `redaction`, `job_concurrency`).
    """

    def __init__(
        self,
        categories: Iterable[Category] | None = None,
        *,
        profile: Profile | None = None,
        profiles: Mapping[str, Profile] | None = None,
        store: str | ConversationStore = DEFAULT_STORE,
        audit: AuditSettings | bool | str | AuditLog = True,
        jobs: JobSettings | JobsMode = "inline",
        timeouts: Timeouts | None = None,
        **flat: Any,
    ) -> None:
        self._pipeline: Pipeline | None = None
        self._pipelines: dict[str, Pipeline] = {}
        sorted_flat = flat_settings(flat)
        self.profiles: Mapping[str, Profile] = _profiles(categories, profile, profiles, sorted_flat)
        """The businesses this orchestrator answers for, by name (the first is the
        default: a conversation that names none)."""
        self._default = next(iter(self.profiles))
        self._timeouts = _settings(Timeouts, timeouts, sorted_flat.timeouts, "timeouts")
        self._audit_settings = _audit_settings(audit, sorted_flat.audit)
        self._job_settings = _job_settings(jobs, sorted_flat.jobs)
        self._audit_spec = self._audit_settings.log
        self.use_retention(self._audit_settings.retention)
        self.app_spec: str | None = None
        """The `module:attr` this orchestrator was loaded from (`load_app`), recorded with
        each turn so that `frontdesk audit replay` can load the same app again."""
        for named in self.profiles.values():
            warn_without_examples(named.categories)
        self._wired = {name: _wiring.wire(p) for name, p in self.profiles.items()}
        self.redactor: Redactor = redactor_of(self._audit_settings.redaction)
        if isinstance(store, str):
            normalise_url(store)  # A bad URL is a ConfigError now, not on the first turn.
        self._store_spec = store
        self._audit: AuditLog | None = None
        self._owns_store = isinstance(store, str)
        self._owns_audit = not isinstance(self._audit_spec, AuditLog)
        self._open_lock = asyncio.Lock()
        self._compaction: BackgroundCompaction | None = None
        self._memories: Memories | None = None
        self._memories_of: dict[str, Memories] = {}
        self._libraries: dict[str, Library] = {}
        self._knowledge = Knowledge(self._opened_library)
        self._memory = LongTermMemory(self._opened_memories, self._memories_now)
        self._handoffs = Handoffs(self._open, self._check_operator_text)
        self._privacy = Privacy(self._opened_records)
        self._past: PastConversations | None = None
        self._secrets: Secrets | None = None
        self._jobs: Jobs | None = None
        self._unfinished: set[asyncio.Task[Any]] = set()  # Turns whose stream reader left.

    # -- feature namespaces -------------------------------------------------------------

    @property
    def memory(self) -> LongTermMemory:
        """The users' long-term memory: `remember`, `recall`, `correct`, `forget`,
        `forget_all`, `wait` (docs/memory.md)."""
        return self._memory

    @property
    def handoffs(self) -> Handoffs:
        """Conversations handed to a person: `open`, `claim`, `reply`, `hand_back`,
        `queue` (docs/operations.md; `await orch.handoffs()` is `queue()`)."""
        return self._handoffs

    @property
    def privacy(self) -> Privacy:
        """A customer's rights over their data: `erase_user`, `export_user`
        (docs/privacy.md)."""
        return self._privacy

    # -- settings: read once, when the orchestrator opens -----------------------------------

    @property
    def profile(self) -> Profile:
        """The default profile (the only one, unless `profiles=` named several)."""
        return self.profiles[self._default]

    @property
    def scrub_secrets(self) -> bool:
        """Whether every profile's turns scrub ruled values from what they store
        (`Profile.scrub_secrets`): then the stored texts need no more redaction to be
        shown."""
        return all(p.scrub_secrets for p in self.profiles.values())

    @property
    def timeouts(self) -> Timeouts:
        """How long a turn waits for its conversation and runs."""
        return self._timeouts

    @property
    def job_settings(self) -> JobSettings:
        """Where the background jobs run."""
        return self._job_settings

    def _set(self, what: str, **changes: Any) -> None:
        """Change a setting before the orchestrator opens (frozen values, replaced whole).

        Raises:
            UserError: the orchestrator is open already (its turns read the settings then).
        """
        if self._pipeline is not None:
            raise UserError(
                f"{', '.join(changes)} is read when the orchestrator opens; set it before"
                " the first call (or pass it to the constructor)"
            )
        if what == "profile":
            profile = self.profile.replace(**changes)
            self.profiles = {**self.profiles, self._default: profile}
            if set(changes) & _WIRED_FIELDS:
                self._wired[self._default] = _wiring.wire(profile)
            else:
                self._wired[self._default] = dataclasses.replace(
                    self._wired[self._default], profile=profile
                )
        elif what == "timeouts":
            self._timeouts = dataclasses.replace(self._timeouts, **changes)
        else:
            self._job_settings = dataclasses.replace(self._job_settings, **changes)

    @property
    def categories(self) -> Mapping[str, Category]:
        """The default profile's categories, by name."""
        return {c.name: c for c in self.profile.categories}

    @property
    def models(self) -> Mapping[str, Model]:
        """The default profile's model per expert."""
        return self._wired[self._default].models

    @property
    def offline_by_default(self) -> bool:
        """No model was named and no provider key is set: every expert is the offline
        stand-in (`frontdesk serve` refuses that unless told `--model offline`)."""
        return any(w.offline_by_default for w in self._wired.values())

    @property
    def business_name(self) -> str:
        """How the default profile's response expert names the business."""
        return self._wired[self._default].business_name

    @property
    def prompts_dir(self) -> Path | None:
        """The default profile's prompt folder."""
        return self._wired[self._default].prompts_dir

    @property
    def settings(self) -> ExpertSettings:
        """The default profile's per-expert model settings."""
        return self.profile.settings

    @property
    def budgets(self) -> Mapping[str, Budget]:
        """The default profile's token budgets, each cut to its model's `context_tokens`
        where one is set (docs/providers.md, "Fitting a small window")."""
        return self._wired[self._default].budgets

    @property
    def max_message_chars(self) -> int:
        """The default profile's longest accepted user message."""
        return self.profile.max_message_chars

    @property
    def token_counter(self) -> TokenCounter:
        """The default profile's token counter."""
        return self._wired[self._default].counter

    @property
    def handoff_policy(self) -> HandoffPolicy:
        """The default profile's hand-off policy."""
        return self.profile.handoff

    @property
    def compaction_policy(self) -> CompactionPolicy:
        """The default profile's compaction policy (settable until the orchestrator opens)."""
        return self.profile.compaction

    @compaction_policy.setter
    def compaction_policy(self, policy: CompactionPolicy) -> None:
        self._set("profile", compaction=policy)

    @property
    def handler_errors(self) -> Literal["reply", "raise"]:
        """The default profile's `handler_errors` (settable until the orchestrator opens)."""
        return self.profile.handler_errors

    @handler_errors.setter
    def handler_errors(self, value: Literal["reply", "raise"]) -> None:
        self._set("profile", handler_errors=value)

    @property
    def lock_timeout(self) -> float:
        """`Timeouts.lock_timeout` (settable until the orchestrator opens)."""
        return self._timeouts.lock_timeout

    @lock_timeout.setter
    def lock_timeout(self, value: float) -> None:
        self._set("timeouts", lock_timeout=value)

    @property
    def jobs_mode(self) -> JobsMode:
        """`JobSettings.mode` (`use_jobs` changes it until the orchestrator opens)."""
        return self._job_settings.mode

    @property
    def job_concurrency(self) -> int:
        """`JobSettings.concurrency` (settable until the orchestrator opens)."""
        return self._job_settings.concurrency

    @job_concurrency.setter
    def job_concurrency(self, value: int) -> None:
        self._set("jobs", concurrency=value)

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
        return self._audit_settings.key is not None or master_key_from_env() is not None

    def counter_for(self, expert: str) -> TokenCounter:
        """The token counter for one expert's model (the default profile's)."""
        return self._wired[self._default].counter_for(expert)

    @property
    def experts(self) -> _wiring.Experts:
        """The triage, request (per category) and response experts of the default profile,
        as wired (for replay)."""
        return self._wired[self._default].experts

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
            on_failure=self._audit_settings.on_failure,
            master_key=self._audit_settings.key,
        )
        try:
            log.check_writable()  # Encrypted database, no key: refuse now.
        except BaseException:
            await log.aclose()
            raise
        return log

    async def _open(self) -> Pipeline:
        """Open the store and audit log on first use (any process may do it); the default
        profile's pipeline."""
        if self._pipeline is not None:
            return self._pipeline
        async with self._open_lock:
            if self._pipeline is not None:
                return self._pipeline
            if self.offline_by_default:  # No model named, no key: say so, once.
                warn_offline_once()
            if any(p.languages for p in self.profiles.values()):  # A multilingual business:
                warm_language_detector()  # loaded in a thread, not by its first Welsh turn.
            store = self._store_spec
            if isinstance(store, str):
                store = await ConversationStore.open(store)
            try:
                self._audit = await self._open_audit(store)
            except BaseException:  # A wrong or missing master key: close what was opened.
                if self._owns_store:
                    await store.aclose()
                raise
            pipelines = {name: self._pipeline_of(name, store) for name in self.profiles}
            default = pipelines[self._default]
            self._compaction = default.compaction
            kinds, periodic = self._job_kinds(default, pipelines)
            jobs = Jobs(
                store=JobStore(store.engine),
                mode=self._job_settings.mode,
                conninfo=_conninfo(store),
                kinds=kinds,
                periodic=periodic,
                concurrency=self._job_settings.concurrency,
            )
            try:
                await jobs.start()
            except BaseException:  # Procrastinate missing or PostgreSQL away: close up.
                await self._close_opened(store)
                raise
            self._jobs = jobs
            for memories in self._memories_of.values():
                memories.jobs = jobs
            self._pipelines = {
                name: dataclasses.replace(p, jobs=jobs) for name, p in pipelines.items()
            }
            # Whether each library is empty is known before the first turn, whose deadline
            # should not pay for the count (`Library.empty`).
            await asyncio.gather(*(p.knowledge.empty() for p in pipelines.values() if p.knowledge))
            self._pipeline = self._pipelines[self._default]
            return self._pipeline

    def _pipeline_of(self, name: str, store: ConversationStore) -> Pipeline:
        """One profile's pipeline on the opened store, with its own memory (its facts only)
        and knowledge (its library's documents). The past conversations' job is built with
        the default profile (each summary is kept for its conversation's profile)."""
        w = self._wired[name]
        profile = w.profile
        triage, requests, response = w.experts
        summariser = summariser_expert(
            w.models["summariser"],
            settings=profile.settings.for_expert("summariser"),
            prompts_dir=w.prompts_dir,
        )
        secrets = Secrets(redactor=self.redactor, engine=store.engine, scrub=profile.scrub_secrets)
        compaction = BackgroundCompaction(
            compactor=Compactor(
                store=store,
                summariser=summariser,
                policy=profile.compaction,
                counter=w.counter,
                audit=self._audit,
                secrets=secrets,
            )
        )
        knowledge_store = KnowledgeStore(store.engine, profile.knowledge_source or name)
        library = self._libraries[name] = Library(
            store=knowledge_store,
            retriever=FullTextPassageRetriever(knowledge_store)
            if profile.embeddings is None
            else HybridRetriever(store=knowledge_store, embedder=profile.embeddings),
        )
        memory_store = MemoryStore(store.engine, profile=name)
        memories = self._memories_of[name] = Memories(
            store=memory_store,
            retriever=profile.retriever or FullTextRetriever(memory_store),
            expert=w.memory_expert,
            audit=self._audit,
            policy=profile.memory_policy or MemoryPolicy(),
            secrets=partial(_drop_values, store, self._categories_by_name()),
            ruled=secrets,
        )
        if name == self._default:
            self._past = PastConversations(
                store=store,
                memory=memory_store,
                summariser=summariser,
                audit=self._audit,
                idle_after=profile.summarise_idle_after,
                secrets=secrets,
            )
            self._memories = memories
            self._secrets = secrets
        return Pipeline(
            app=app_record(self.app_spec, triage, requests, response, name),
            memory=memories if profile.memory else None,
            store=store,
            audit=self._audit,
            deadline=self._timeouts.turn_deadline,
            # A server that answers one request at a time would only queue the guess.
            speculate=profile.speculate and not w.one_at_a_time,
            handler_errors=profile.handler_errors,
            on_unreadable=profile.on_unreadable,
            categories={c.name: c for c in profile.categories},
            triage=triage,
            requests=requests,
            response=response,
            context_extras=dict(profile.context or {}),
            counters=w.counters,
            budgets=dict(w.budgets),
            lease=partial(self._lease, store),
            handoff=profile.handoff,
            counter=w.counter,
            compaction=compaction,
            compaction_policy=profile.compaction,
            knowledge=library if profile.knowledge else None,
            past=self._past if profile.memory and profile.past_conversations else None,
            profile=name,
            # A turn of requests with no rule that changes a value has no ruled-value step.
            secrets=secrets
            if secrets.change_any(c.request for c in profile.categories if c.request)
            else None,
            variants=w.variants,
            confirm_ttl=profile.confirm_window,
            screen=profile.screen,
            screen_mode=profile.screen_mode,
            spend_limit=profile.spend_limit,
            review=w.review,
            multi_intent=profile.multi_intent,
            languages=None if profile.languages is None else tuple(profile.languages),
            pending_ttl=profile.pending_window,
            router=None
            if profile.router is None
            else Router.bind(profile.router, CategoryVectors(store.engine), profile.categories),
        )

    def _job_kinds(
        self, p: Pipeline, pipelines: Mapping[str, Pipeline]
    ) -> tuple[list[JobKind], list[PeriodicJob]]:
        """Every job kind and periodic job this orchestrator runs (docs/jobs.md, "Adding a
        job kind"): a new one is added here."""
        assert self._memories is not None
        compactors = {name: q.compaction.compactor for name, q in pipelines.items()}
        kinds = [
            self._memories.job_kind(p.store.get, p.store.conversation, self._memories_of_conv),
            p.compaction.job_kind(compactors),
        ]
        periodic = []
        if p.handoff.timeout is not None:
            periodic.append(handoff.timeouts_job(p, p.handoff, p.lease))
        kinds.append(erasure.erase_job_kind(p.store.engine, self._audit))
        periodic.append(resolution.assume_job(p, self._assume_after()))
        if self.retention is not None and self._audit is not None:
            periodic.append(erasure.retention_job(p.store.engine, self._audit, self.retention))
        if p.past is not None:  # Idle conversations' summaries kept as memories.
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
        """The businesses' documents: `add`, `remove`, `search`, `sources`, each of one
        profile's library (`profile=NAME`; the default profile's without), usable before
        `open()` (docs/knowledge.md)."""
        return self._knowledge

    async def _opened_library(self, profile: str | None) -> Library:
        name = self._named(profile) or self._default
        await self._open()
        return self._libraries[name]

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
        self._job_settings = JobSettings(mode=mode, concurrency=self._job_settings.concurrency)

    def use_retention(self, retention: erasure.RetentionPolicy | timedelta | str | None) -> None:
        """Run retention as a periodic job (`AuditSettings.retention`); what
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

    def _in_flight(self) -> contextlib.AbstractContextManager[None]:
        """A turn in flight: this process's job runner waits for it to end before it starts
        a job (`Jobs.foreground`)."""
        return contextlib.nullcontext() if self._jobs is None else self._jobs.foreground()

    async def handle(
        self,
        conversation_id: str,
        text: str,
        *,
        user_id: str | None = None,
        client_message_id: str | None = None,
        profile: str | None = None,
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
            profile: The business answering (a name of `profiles`), recorded on a new
                conversation; `None`: the conversation's own (the default for a new one).

        Raises:
            InvalidUserText: before anything is stored or sent (`InputTooLarge` names the
                character limit or the expert whose question allowance it is over).
            ConversationNotFound: the conversation belongs to another user (checked in the
                transaction that would store the message, before any model call).
            ProfileMismatch: the conversation records another profile than `profile`.
            IdempotencyConflict: the id was used with other text; nothing is written.
            ConversationBusy: another turn held the conversation past `lock_timeout` (or
                past `turn_deadline`, which the wait counts against).
            LeaseLost: the turn stalled past `lock_ttl` and another turn took the
                conversation over; none of this turn's last writes landed.
            TurnFailed: the models or the database could not finish the turn; the user
                message is stored, with the safe reply as a `failed` marker under it.
        """
        name = self._named(profile)
        w = self._wired[name or self._default]
        text = check_user_text(text, max_chars=w.profile.max_message_chars)
        w.check_question(text)
        p = await self._pipeline_for(name, conversation_id, user_id)
        with self._in_flight():
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
        profile: str | None = None,
    ) -> AsyncGenerator[TurnEvent, None]:
        """`handle`, as events: `routed`, `extracted`, `delta`..., then `done` or `failed`.

        See `frontdesk.orchestrator.stream` for the order, the faults, and what happens
        when the consumer stops reading (the turn still finishes and stores its reply).
        """
        handle = partial(
            self.handle,
            conversation_id,
            text,
            user_id=user_id,
            client_message_id=client_message_id,
            profile=profile,
        )
        return stream_turn(handle, finish_in_background=self.finish_in_background)

    async def edit(
        self,
        user_message_id: str,
        text: str,
        *,
        user_id: str | None = None,
        profile: str | None = None,
    ) -> Reply:
        """Answer an edited user message: a sibling branch under the same parent.

        Raises:
            ConversationNotFound: no such message in a conversation of `user_id` (the same
                for a missing message and another user's, so neither can be probed).
            ProfileMismatch: the conversation records another profile than `profile`.
        """
        p = await self._pipeline_of_message(user_message_id, user_id, profile)
        w = self._wired[p.profile or self._default]
        text = check_user_text(text, max_chars=w.profile.max_message_chars)
        w.check_question(text)
        with self._in_flight():
            return await turn.edit(p, user_message_id, text, user_id=user_id)

    async def regenerate(
        self, assistant_message_id: str, *, user_id: str | None = None, profile: str | None = None
    ) -> Reply:
        """Answer the same user message again: a sibling answer.

        The turn's stored outcome is reused: a regeneration writes the reply again and
        never runs the handler a second time (an order is not placed twice).

        Raises:
            ConversationNotFound: no such message in a conversation of `user_id`.
            ProfileMismatch: the conversation records another profile than `profile`.
        """
        p = await self._pipeline_of_message(assistant_message_id, user_id, profile)
        with self._in_flight():
            return await turn.regenerate(p, assistant_message_id, user_id=user_id)

    def _named(self, profile: str | None) -> str | None:
        """The profile a call names, checked (`None`: none named).

        Raises:
            ConfigError: no profile of that name.
        """
        if profile is not None and profile not in self.profiles:
            raise ConfigError(
                f"no profile {profile!r}; this orchestrator has {', '.join(self.profiles)}"
            )
        return profile

    async def _pipeline_for(
        self, name: str | None, conversation_id: str, user_id: str | None
    ) -> Pipeline:
        """The pipeline of the profile named, else of the conversation's own.

        With one profile this is that profile's (its first transaction records or checks
        it: no extra read). With several and none named, the conversation's recorded
        profile is read first (a new conversation gets the default)."""
        default = await self._open()
        if name is not None:
            return self._pipelines[name]
        if len(self._pipelines) == 1:
            return default
        try:
            recorded = await default.store.profile_of(conversation_id, user_id)
        except ConversationNotFound:
            return default  # A new conversation (another user's fails in its first write).
        return self._pipelines.get(recorded or self._default, default)

    async def _pipeline_of_message(
        self, message_id: str, user_id: str | None, profile: str | None
    ) -> Pipeline:
        """The pipeline answering the conversation of `message_id` (edit, regenerate)."""
        name = self._named(profile)
        default = await self._open()
        if name is None and len(self._pipelines) == 1:
            return default
        try:
            message = await default.store.get(message_id)
            recorded = await default.store.profile_of(message.conversation_id, user_id, named=name)
        except (MessageNotFound, ConversationNotFound):
            return self._pipelines[name or self._default]  # The turn says it is not found.
        return self._pipelines[name or recorded or self._default]

    # -- hand-off to a person: thin aliases of `handoffs` --------------------------------

    async def hand_off(self, conversation_id: str, reason: str) -> Handoff:
        """`handoffs.open` (an alias kept for one release)."""
        return await self.handoffs.open(conversation_id, reason)

    async def claim(self, conversation_id: str, *, operator_id: str) -> Claim:
        """`handoffs.claim` (an alias kept for one release)."""
        return await self.handoffs.claim(conversation_id, operator_id=operator_id)

    async def operator_reply(self, conversation_id: str, text: str, *, operator_id: str) -> str:
        """`handoffs.reply` (an alias kept for one release)."""
        return await self.handoffs.reply(conversation_id, text, operator_id=operator_id)

    async def hand_back(
        self, conversation_id: str, *, operator_id: str | None = None, resolved: bool = False
    ) -> None:
        """`handoffs.hand_back` (an alias kept for one release)."""
        await self.handoffs.hand_back(conversation_id, operator_id=operator_id, resolved=resolved)

    def _assume_after(self) -> float:
        """The assume sweep's wait: the default profile's `assume_after` (one sweep reads
        every conversation)."""
        return resolution.assume_seconds(self.profiles[self._default].assume_after)

    # -- did it help (docs/outcomes.md) --------------------------------------------------

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

    def _check_operator_text(self, text: str) -> str:
        return check_user_text(text, max_chars=self.max_message_chars)

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
        """`privacy.erase_user` (an alias kept for one release)."""
        return await self.privacy.erase_user(user_id, requested_by=requested_by)

    async def _opened_records(self) -> erasure.UserRecords:
        p = await self._open()
        # A subject access request covers the user's facts of every profile.
        every = MemoryStore(p.store.engine, profile=None)
        return erasure.UserRecords(
            store=p.store, audit=self._audit, memories=every, secrets=self._secrets
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
        for model in {id(m): m for w in self._wired.values() for m in w.owned}.values():
            close = getattr(model, "aclose", None)
            if close is not None:
                await close()
        routers = {id(w.profile.router): w.profile.router for w in self._wired.values()}
        for router in routers.values():
            if router is not None:
                await router.aclose()  # Its embedder's client, when built from a spec.
        self._pipeline = None
        self._pipelines = {}
        self._audit = None
        self._compaction = None
        self._memories = None
        self._memories_of = {}
        self._libraries = {}
        self._past = None
        self._jobs = None

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _categories_by_name(self) -> Mapping[str, list[Category]]:
        """Every profile's categories by name (a name two profiles share gives both)."""
        by_name: dict[str, list[Category]] = {}
        for profile in self.profiles.values():
            for category in profile.categories:
                by_name.setdefault(category.name, []).append(category)
        return by_name

    # -- long-term memory: thin aliases of `memory` (docs/memory.md) -------------------

    async def _opened_memories(self, profile: str | None) -> Memories:
        name = self._named(profile)
        await self._open()
        return self._memories_now(name)

    def _memories_now(self, profile: str | None) -> Memories:
        """The memory of `profile` (`None`: the default profile's).

        Raises:
            ConfigError: no profile of that name.
            UserError: the orchestrator is not open yet.
        """
        name = self._named(profile) or self._default
        if name not in self._memories_of:
            raise UserError("memory opens with the store; await orch.open() first")
        return self._memories_of[name]

    def _memories_of_conv(self, recorded: str | None) -> Memories:
        """The memory that learns from a conversation of the `recorded` profile (the
        default profile's for one from before profiles, or of a profile since removed)."""
        return self._memories_of.get(recorded or self._default) or self._memories_now(None)

    async def remember(
        self,
        user_id: str,
        text: str,
        key: str | None = None,
        *,
        source: MemorySource = "user",
        trust: MemoryTrust = "verified",
    ) -> Memory:
        """`memory.remember` (an alias kept for one release)."""
        return await self.memory.remember(user_id, text, key, source=source, trust=trust)

    async def memories(self, user_id: str) -> list[Memory]:
        """`memory.recall(user_id)` (an alias kept for one release)."""
        return await self.memory.recall(user_id)

    async def past_conversations(self, user_id: str) -> list[Memory]:
        """`memory.past_conversations(user_id)`."""
        return await self.memory.past_conversations(user_id)

    async def correct(self, user_id: str, memory_id: str, text: str, *, by: str = "user") -> Memory:
        """`memory.correct` (an alias kept for one release)."""
        return await self.memory.correct(user_id, memory_id, text, by=by)

    async def forget(self, user_id: str, memory_id: str, *, by: str = "user") -> None:
        """`memory.forget` (an alias kept for one release)."""
        await self.memory.forget(user_id, memory_id, by=by)

    async def forget_all(self, user_id: str, *, by: str = "user") -> int:
        """`memory.forget_all` (an alias kept for one release)."""
        return await self.memory.forget_all(user_id, by=by)

    # -- machinery ----------------------------------------------------------------------

    def _lease(self, store: ConversationStore, conversation_id: str) -> TurnLease:
        """Serialise turns on one conversation across processes (a lease, not yet taken).

        The wait counts against the turn's deadline, so it is never longer than that (the
        settings are the ones read when the orchestrator opened)."""
        t = self._timeouts
        wait = t.lock_timeout if t.turn_deadline is None else min(t.lock_timeout, t.turn_deadline)
        return store.turn_lease(conversation_id, timeout=wait, ttl=t.lock_ttl)


_WIRED_FIELDS = frozenset(
    {"categories", "model", "prompts", "business_name", "budgets", "settings", "token_counter"}
)
"""The profile fields its experts are built from (changing one wires the profile again)."""


def _profiles(
    categories: Iterable[Category] | None,
    profile: Profile | None,
    profiles: Mapping[str, Profile] | None,
    flat: FlatSettings,
) -> dict[str, Profile]:
    """The orchestrator's profiles by name, from exactly one of its three forms.

    Raises:
        TypeError: none or several forms, or flat profile keywords beside a `Profile`.
    """
    given = [
        n
        for n, v in (("categories", categories), ("profile", profile), ("profiles", profiles))
        if v is not None
    ]
    if len(given) != 1:
        raise TypeError(
            "Orchestrator() takes one of categories (the short form, with the profile's"
            f" fields as keywords), profile=Profile(...) or profiles={{name: Profile(...)}};"
            f" got {', '.join(given) or 'none'}"
        )
    if (flat.profile or flat.handoff) and categories is None:
        names = sorted({*flat.profile, *(f"handoff_{k}" for k in flat.handoff)})
        raise TypeError(
            f"{', '.join(names)}: what a business is goes on its Profile(...) when"
            " profile= or profiles= is given"
        )
    if profiles is not None:
        if not profiles:
            raise ConfigError("profiles= needs at least one profile")
        for name, value in profiles.items():
            check_profile_name(name)
            if not isinstance(value, Profile):
                raise ConfigError(f"profiles[{name!r}] must be a Profile, got {value!r}")
        return dict(profiles)
    if profile is not None:
        if not isinstance(profile, Profile):
            raise ConfigError(f"profile= must be a Profile, got {profile!r}")
        return {DEFAULT_PROFILE: profile}
    assert categories is not None
    fields = dict(flat.profile)
    if flat.handoff:
        if "handoff" in fields:
            raise TypeError("pass handoff=HandoffPolicy(...) or the handoff_* keywords, not both")
        fields["handoff"] = HandoffPolicy(**flat.handoff)
    return {DEFAULT_PROFILE: Profile(list(categories), **fields)}


S = TypeVar("S", Timeouts, AuditSettings, JobSettings)


def _settings(kind: type[S], given: S | None, flat: Mapping[str, Any], name: str) -> S:
    """A runtime settings object: the one given, else built from its flat keywords.

    Raises:
        TypeError: both.
    """
    if given is None:
        return kind(**flat)
    if flat:
        raise TypeError(f"pass {name}={kind.__name__}(...) or {', '.join(flat)}, not both")
    if not isinstance(given, kind):
        raise ConfigError(f"{name}= must be a {kind.__name__}, got {given!r}")
    return given


def _audit_settings(
    audit: AuditSettings | bool | str | AuditLog, flat: Mapping[str, Any]
) -> AuditSettings:
    """`audit=` as `AuditSettings` (its `log` alone is the short form)."""
    if isinstance(audit, AuditSettings):
        return _settings(AuditSettings, audit, flat, "audit")
    return AuditSettings(log=audit, **flat)


def _job_settings(jobs: JobSettings | JobsMode, flat: Mapping[str, Any]) -> JobSettings:
    """`jobs=` as `JobSettings` (its `mode` alone is the short form)."""
    if isinstance(jobs, JobSettings):
        return _settings(JobSettings, jobs, flat, "jobs")
    return JobSettings(mode=jobs, **flat)


async def _drop_values(
    store: ConversationStore, categories: Mapping[str, list[Category]], message_id: str
) -> list[str]:
    """The values of the `Redact("drop")` fields of the request a user message's turn
    extracted: the memory expert never keeps them (`Memories.secrets`). One read, in the
    background learning job only (a turn never waits for it)."""
    outcome = (await store.turn_record(message_id)).outcome
    if outcome is None or not isinstance(outcome.request, dict):
        return []
    values: list[str] = []
    for category in categories.get(outcome.category, []):
        if category.request is None:
            continue
        for path, rule in field_rules(category.request).items():
            if rule == "drop":
                values.extend(_values_at(outcome.request, path.split(".")))
    return values


def _values_at(data: Any, path: list[str]) -> list[str]:
    """The scalar values at a dotted field path of JSON data (lists looked through)."""
    if isinstance(data, list):
        return [v for item in data for v in _values_at(item, path)]
    if not path:
        return [] if data is None or isinstance(data, dict) else [str(data)]
    if not isinstance(data, dict):
        return []
    return _values_at(data.get(path[0]), path[1:])


def _conninfo(store: ConversationStore) -> str | None:
    """The libpq URL of a PostgreSQL store (Procrastinate's connection), else `None`."""
    url = store.engine.url
    if url.get_backend_name() != "postgresql":
        return None
    return url.set(drivername="postgresql").render_as_string(hide_password=False)
