"""Long-term memory in a turn: the facts looked up at its start, and learnt after its reply.

Reading: at the start of a turn `Memories.recall` ranks the user's current facts by
relevance to the question, then recency (`threads.memory.Retriever`); `ranked` leaves out
the summary of the very conversation being answered (its turns are in the thread) and,
with `past_conversations=False`, every past conversation; each expert's view cuts them to
its `memory` allowance (lowest-ranked first) and `block` renders what is kept as two
delimited blocks, one per trust: what the customer told us (their words, not verified:
the memory expert's facts, past conversations) and what the business recorded. They go
at the start of the last user turn (`experts._call.with_memory`), never in system text,
never in the stored thread or in the response expert's instruction.

Writing: after the reply, the memory expert runs on the user's message as a background job
(like compaction), and what it returns passes `MemoryPolicy` (`frontdesk.memory_policy`)
before it is stored as the customer's word (`trust="customer"`); a refused fact is audited
(`memory_refused`, with the reason, never the text). The job never holds the
conversation's lease, and a slow, failing or rubbish memory expert never slows or fails a
turn; its calls are audited in the conversation's chain, failures as `memory_failed`. One
user's memory work runs in order (a later "I moved to Mumbai" never lands before "I live
in Pune"). A turn waits at most `SETTLE_WAIT` for its user's memory work still running in
this process, so a fact said in one turn is usually known in the next without a slow
memory expert delaying it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from pydantic import BaseModel

from frontdesk._driver import savepoint
from frontdesk.audit.chains import user_chain_id
from frontdesk.audit.events import AuditEvent
from frontdesk.audit.refs import UNKEYED, UserRefs
from frontdesk.audit.store import AuditLog
from frontdesk.db import Connection, run_write
from frontdesk.errors import MessageNotFound
from frontdesk.experts import MemoryBlock
from frontdesk.experts.memory import Fact, MemoryExpert
from frontdesk.experts.providers import Message
from frontdesk.jobs.runner import DrainTimeout, JobKind, Jobs
from frontdesk.jobs.store import JobSpec, mark_done
from frontdesk.labels import (
    CUSTOMER_MEMORY_END,
    CUSTOMER_MEMORY_LABEL,
    VERIFIED_MEMORY_END,
    VERIFIED_MEMORY_LABEL,
    neutralise,
)
from frontdesk.memory import Memory, MemorySource, MemoryTrust
from frontdesk.memory_policy import MemoryPolicy
from frontdesk.orchestrator import spend
from frontdesk.orchestrator._recorder import TurnRecorder, observing
from frontdesk.orchestrator.memory_gate import may_state_a_fact as may_state_a_fact
from frontdesk.orchestrator.ruled_values import Secrets
from frontdesk.ruled import RuledValues, replaced
from frontdesk.threads import ERASED_MARKER, ConversationRecord
from frontdesk.threads.budget import Document
from frontdesk.threads.builder import ExpertView
from frontdesk.threads.memory import FullTextRetriever, MemoryStore, Retriever
from frontdesk.threads.spend import record_spend
from frontdesk.threads.store import MessageRecord

log = structlog.get_logger("frontdesk.memory")

RECALL_LIMIT = 32
"""Facts looked up per turn at most (about what the largest default allowance holds)."""
LEARN_TIMEOUT = 30.0
"""Seconds one background memory job may take (model retries included)."""
CLOSE_TIMEOUT = 60.0
"""Seconds `wait` waits for the background jobs."""
SETTLE_WAIT = 0.1
"""Seconds a turn waits, at most, for its user's memory jobs still running here."""
LEARN = "memory.learn"
"""The job kind that runs the memory expert on one user message."""


def learn_spec(user_id: str, message_id: str, refs: UserRefs = UNKEYED) -> JobSpec:
    """The job learning from the user message `message_id` (ids only: the job reads the
    message when it runs, so an erasure leaves nothing readable in the job row)."""
    return JobSpec(
        kind=LEARN, args={"message_id": message_id}, lock=refs.job_lock("memory_lock", user_id)
    )


@dataclass(frozen=True, kw_only=True)
class Remembered(Document):
    """A recalled fact as a ranked budget item, with whose word it is (`block` sorts the
    kept ones into the customer's block and the business's)."""

    trust: MemoryTrust = "customer"


SecretsOf = Callable[[str], Awaitable[Collection[str]]]
"""`secrets(message_id)`: the values the memory expert must never keep from that user
message (the `Redact("drop")` fields of its turn's request)."""


def ranked(
    memories: Sequence[Memory], *, conversation_id: str | None = None, past: bool = True
) -> list[Document]:
    """The recalled facts as ranked budget items (the first is the most relevant): never
    the summary of `conversation_id` itself (its turns are in the thread already), and no
    past conversation at all when `past` is off (`past_conversations=False`)."""
    sent = [
        m
        for m in memories
        if not m.is_past_conversation or (past and m.conversation_id != conversation_id)
    ]
    count = len(sent)
    return [
        Remembered(text=_line(_said(m)), rank=float(count - i), id=m.id, trust=m.trust)
        for i, m in enumerate(sent)
    ]


def _said(memory: Memory) -> str:
    """A fact as the block says it: a past conversation's summary says what it is."""
    if memory.source == "conversation_summary":
        return f"An earlier conversation ({memory.updated_at:%Y-%m-%d}): {memory.text}"
    return memory.text


@functools.lru_cache(maxsize=4096)
def _line(text: str) -> str:
    """A fact as one line of the block (stored facts hold no newline), no label of ours
    inside. Cached: the same facts come back turn after turn, and the label patterns are
    a measurable part of a turn's memory cost (benchmarks.memory)."""
    return f"- {neutralise(text)}"


def _blocks(customer: Sequence[str], verified: Sequence[str]) -> str:
    """The two delimited blocks (an empty one left out): the business's records, then the
    customer's own words. Every line is neutralised already, so no label is forged."""
    parts = []
    if verified:
        parts.append("\n".join([VERIFIED_MEMORY_LABEL, *verified, VERIFIED_MEMORY_END]))
    if customer:
        parts.append("\n".join([CUSTOMER_MEMORY_LABEL, *customer, CUSTOMER_MEMORY_END]))
    return "\n\n".join(parts)


def _trust(document: Document) -> MemoryTrust:
    return document.trust if isinstance(document, Remembered) else "customer"


def block(view: ExpertView) -> MemoryBlock | None:
    """The memory blocks an expert is sent: the facts its budget kept, highest first, in
    the block of whose word they are."""
    kept = view.fit.memory
    if not kept:
        return None
    text = _blocks(
        [d.text for d in kept if _trust(d) == "customer"],
        [d.text for d in kept if _trust(d) == "verified"],
    )
    return MemoryBlock(text=text, ids=tuple(d.id for d in kept))


def known_block(memories: Sequence[Memory]) -> MemoryBlock | None:
    """What the memory expert is told is remembered already (each fact with its key; past
    conversations are not facts, and have no key to reuse)."""
    facts = [m for m in memories if not m.is_past_conversation]
    if not facts:
        return None

    def line(m: Memory) -> str:
        return _line(m.text) + (f" (key: {m.key})" if m.key else "")

    return MemoryBlock(
        text=_blocks(
            [line(m) for m in facts if m.trust == "customer"],
            [line(m) for m in facts if m.trust == "verified"],
        ),
        ids=tuple(m.id for m in facts),
    )


def filled_from(
    request: object, memory: MemoryBlock, messages: Sequence[Message], named: Sequence[str]
) -> tuple[str, ...]:
    """The request's fields whose value is in the memory blocks sent and in no user turn of
    the conversation, that the request expert did not list in `from_memory` (`named`): a
    model fooled into filling a field from memory need not say so. Only a text or number
    of 3 characters or more counts (a "yes" or a 2 is everywhere)."""
    if not isinstance(request, BaseModel):
        return ()
    remembered = memory.text.casefold()
    said = "\n".join(
        _without_memory(m["content"], memory).casefold() for m in messages if m["role"] == "user"
    )
    found = []
    for name, value in request:
        if name in named or isinstance(value, bool) or not isinstance(value, str | int | float):
            continue
        text = str(value).strip().casefold()
        if len(text) >= 3 and text in remembered and text not in said:
            found.append(name)
    return tuple(found)


def _without_memory(content: str, memory: MemoryBlock) -> str:
    """A user turn's own text, without the memory blocks put at its start."""
    return content.removeprefix(memory.text)


@dataclass
class Memories:
    """The orchestrator's memory: the store, the retriever and the background memory expert."""

    store: MemoryStore
    retriever: Retriever
    expert: MemoryExpert
    audit: AuditLog | None = None
    jobs: Jobs | None = None
    """The orchestrator's jobs (`recall` settles the user's, `wait` drains them)."""
    policy: MemoryPolicy = field(default_factory=MemoryPolicy)
    """What the memory expert may keep (`Orchestrator(memory_policy=...)`)."""
    secrets: SecretsOf | None = None
    """The values never to keep from a user message (`SecretsOf`); `None`: none known."""
    ruled: Secrets | None = None
    """The users' kept ruled values (`Redact`, every conversation of theirs): never sent to
    the memory expert, never stored in a fact (replaced by their shown forms)."""

    @property
    def refs(self) -> UserRefs:
        """How users are named in job locks and their own audit chain (the log's refs)."""
        return UNKEYED if self.audit is None else self.audit.refs

    async def recall(self, user_id: str | None, text: str) -> list[Memory]:
        """The user's facts for a turn about `text`, best first (none without a user).

        A lookup that fails costs the turn its memories, never the turn."""
        if user_id is None:
            return []
        await self._settle(user_id)
        try:
            return await self.retriever.retrieve(user_id, text, limit=RECALL_LIMIT)
        except Exception as e:
            log.warning("memory.recall_failed", error=type(e).__name__)
            return []

    async def reader(
        self, user_id: str | None, text: str
    ) -> Callable[[Connection], list[Memory]] | None:
        """The lookup as a read for the turn's first transaction (no extra round trip), once
        this user's memory work still running here has settled; `None` without a user, or
        for a retriever that is not the database's own (the turn then calls `recall`)."""
        if user_id is None or not isinstance(self.retriever, FullTextRetriever):
            return None
        await self._settle(user_id)
        retriever = self.retriever

        def read(conn: Connection) -> list[Memory]:
            try:
                with savepoint(conn):  # A failed lookup leaves the turn's writes intact.
                    return retriever.retrieve_sync(conn, user_id, text, limit=RECALL_LIMIT)
            except Exception as e:
                log.warning("memory.recall_failed", error=type(e).__name__)
                return []

        return read

    async def write(
        self,
        user_id: str,
        text: str,
        *,
        key: str | None,
        source: MemorySource,
        conversation_id: str | None = None,
        message_id: str | None = None,
        recorder: TurnRecorder | None = None,
        trust: MemoryTrust | None = None,
    ) -> Memory:
        """Store one fact now and audit it (without its text): in `recorder` when given (a
        handler's write, part of its turn's batch), else in the user's chain. `trust`:
        whose word it is (`None`: by its source)."""
        if recorder is None:  # The app's own: checked against every kept value (one read).
            text = (await self._values(user_id)).text(text)
        memory, superseded = await self.store.add(
            user_id,
            text,
            key=key,
            source=source,
            conversation_id=conversation_id,
            message_id=message_id,
            trust=trust,
        )
        payload = {
            "memory_ids": [memory.id],
            "superseded": superseded,
            "keys": [memory.key],
            "source": source,
            "trust": memory.trust,
        }
        if recorder is not None:
            recorder.note("memory_written", **payload)
        else:
            await self.note_for_user(user_id, "memory_written", payload)
        return memory

    async def note_for_user(self, user_id: str, kind: str, payload: dict[str, object]) -> None:
        """Append one event to the user's own audit chain (no conversation stands behind it)."""
        if self.audit is None:
            return
        chain = user_chain_id(user_id, self.audit.refs)
        event = AuditEvent(kind=kind, turn_id=chain, payload=payload)  # type: ignore[arg-type]
        # No fact text, only ids and keys: in clear, so it outlives an erasure readable.
        await self.audit.append(chain, [event], in_clear=True)

    def job_kind(
        self,
        message: Callable[[str], Awaitable[MessageRecord]],
        conversation: Callable[[str], Awaitable[ConversationRecord | None]],
        of_profile: Callable[[str | None], Memories] | None = None,
    ) -> JobKind:
        """The `memory.learn` job kind, reading the message and its owner through the
        conversation store's `message` and `conversation`; the facts are learnt by the
        memory of the conversation's profile (`of_profile`; this one without it)."""

        async def run(args: Mapping[str, Any]) -> None:
            message_id = str(args["message_id"])
            key = f"learn:{message_id}"
            if self.jobs is not None and await self.jobs.store.is_done(key):
                return  # Learnt already: a second run changes nothing.
            try:
                question = await message(message_id)
            except MessageNotFound:  # Deleted since: nothing to learn.
                return
            owner = await conversation(question.conversation_id)
            if owner is None or owner.user_id is None or question.content == ERASED_MARKER:
                return
            learner = self if of_profile is None else of_profile(owner.profile)
            await learner.learn(
                owner.user_id, question.conversation_id, message_id, question.content, done_key=key
            )

        return JobKind(name=LEARN, run=run, timeout=LEARN_TIMEOUT, yields=True)

    async def wait(self, within: float = CLOSE_TIMEOUT) -> int:
        """Wait, at most `within` seconds, for the learning recorded so far; how many
        jobs are left (0: every fact said so far is learnt).

        With `jobs="inline"` this drains the background jobs (`Orchestrator.drain`). With
        `jobs="worker"` the workers learn: this looks at the job rows of the learning this
        process recorded and returns as soon as they are done, or at once when no worker
        is alive (logging `jobs.no_runner`: nobody would learn them while it waited)."""
        if self.jobs is None:
            return 0
        if self.jobs.mode == "worker":
            return await self.jobs.wait([LEARN], within)
        try:
            await self.jobs.drain(within)
        except DrainTimeout as e:
            return e.left
        return 0

    async def _settle(self, user_id: str) -> None:
        if self.jobs is not None and self.jobs.unsettled:  # Bounded: the job goes on.
            await self.jobs.settle(self.refs.job_lock("memory_lock", user_id), SETTLE_WAIT)

    async def learn(
        self, user_id: str, conversation_id: str, message_id: str, text: str, *, done_key: str
    ) -> None:
        """Run the memory expert on one user message and store what it found, with
        `done_key` in the same transaction. A failure is audited (`memory_failed`), then
        raised, so the job is retried."""
        async with asyncio.timeout(LEARN_TIMEOUT):
            await self._learn(user_id, conversation_id, message_id, text, done_key=done_key)

    async def _learn(
        self, user_id: str, conversation_id: str, message_id: str, text: str, *, done_key: str
    ) -> None:
        recorder = TurnRecorder(turn_id=message_id)
        meta = {"conversation_id": conversation_id, "turn_id": message_id}
        try:
            # A ruled value (`Redact`) is never sent, nor kept if the expert returns one.
            values = await self._values(user_id)
            text = values.text(text)
            # What is already known and closest to the message (so its keys can be reused).
            known = await self.retriever.retrieve(user_id, text, limit=RECALL_LIMIT)
            with observing(recorder):
                result = await self.expert.run(
                    text, known=known_block(known), metadata=meta, observer=recorder
                )
            secrets = () if self.secrets is None else await self.secrets(message_id)
            scrubbed = [f.model_copy(update={"text": values.text(f.text)}) for f in result.facts]
            facts = self._allowed(scrubbed, secrets, recorder)
            usage, models = spend.used(recorder)  # Counted by the spend limits.

            def done(conn: Connection) -> None:
                mark_done(conn, done_key)
                if usage:
                    record_spend(
                        conn,
                        conversation_id=conversation_id,
                        expert="memory",
                        usage=usage,
                        models=models,
                    )

            written = await self.store.add_many(
                user_id,
                [(f.text, f.key) for f in facts],
                source="memory_expert",
                conversation_id=conversation_id,
                message_id=message_id,
                also=done,
                trust="customer",
            )
        except (Exception, TimeoutError, asyncio.CancelledError) as e:
            recorder.note("memory_failed", error=f"{type(e).__name__}: {e}")
            with contextlib.suppress(Exception):
                await self._audit(conversation_id, user_id, recorder)
            usage, models = spend.used(recorder)
            if usage:  # A failed answer was paid for too.
                with contextlib.suppress(Exception):
                    await run_write(
                        self.store.engine,
                        lambda conn: record_spend(
                            conn,
                            conversation_id=conversation_id,
                            expert="memory",
                            usage=usage,
                            models=models,
                        ),
                    )
            log.warning("memory.failed", conversation_id=conversation_id, error=type(e).__name__)
            raise
        if written:
            recorder.note(
                "memory_written",
                memory_ids=[m.id for m, _ in written],
                superseded=[s for _, sup in written for s in sup],
                keys=[m.key for m, _ in written],
                source="memory_expert",
                trust="customer",
            )
        await self._audit(conversation_id, user_id, recorder)

    def _allowed(
        self, facts: Sequence[Fact], secrets: Collection[str], recorder: TurnRecorder
    ) -> list[Fact]:
        """The facts the policy lets the memory expert keep; the others are noted in the
        audit (`memory_refused`: the reason and the key, never the text, which may hold
        an identifier or a secret)."""
        kept: list[Fact] = []
        refused: list[dict[str, object]] = []
        for fact in facts:
            why = self.policy.refusal(fact.text, fact.key, secrets=secrets)
            if why is None:
                kept.append(fact)
                continue
            named = why.reason in ("claim", "key_not_allowed")  # A key may hold the value.
            refused.append(
                {"reason": why.reason, "why": why.why, "key": fact.key if named else None}
            )
        if refused:
            recorder.note("memory_refused", refused=refused)
            log.info("memory.refused", reasons=[r["reason"] for r in refused])
        return kept

    async def _values(self, user_id: str) -> RuledValues:
        """The user's kept ruled values (one read; none without `ruled`)."""
        if self.ruled is None:
            return RuledValues(b"", user_id, ())
        return await self.ruled.values(user_id=user_id)

    async def _audit(self, conversation_id: str, user_id: str, recorder: TurnRecorder) -> None:
        if self.audit is None or not recorder.events:
            return
        try:  # The memory expert's call holds the user's words: under the user's data key.
            await self.audit.append(conversation_id, recorder.events, user_id=user_id)
        except Exception:  # The facts stand; ops see the log.
            log.exception("memory.audit_failed", conversation_id=conversation_id)


@dataclass(frozen=True, kw_only=True)
class HandlerMemory:
    """`HandlerContext.memory`: facts a handler writes, for the turn's user."""

    memories: Memories
    user_id: str
    conversation_id: str
    message_id: str
    recorder: TurnRecorder
    known: Mapping[str, str] = field(default_factory=dict)
    """The turn's ruled values (`Redact`) with their shown forms: never remembered."""

    async def remember(self, text: str, *, key: str | None = None) -> Memory:
        """Remember `text` about the turn's user (`key`: facts with the same key supersede
        one another). Audited with the turn, without the text; a ruled value of the turn's
        request is kept in its shown form (`[PIN]`)."""
        return await self.memories.write(
            self.user_id,
            replaced(text, self.known),
            key=key,
            source="handler",
            conversation_id=self.conversation_id,
            message_id=self.message_id,
            recorder=self.recorder,
        )

    async def recall(self) -> list[Memory]:
        """The turn's user's current facts, most recently updated first (what `memories`
        lists), including any this handler remembered a moment ago."""
        return await self.memories.store.current(self.user_id)


def for_handler(
    memories: Memories | None,
    user_id: str | None,
    question: MessageRecord,
    recorder: TurnRecorder,
    known: Mapping[str, str] | None = None,
) -> dict[str, HandlerMemory]:
    """The `memory=` of a turn's `HandlerContext` (nothing without a user or a memory);
    `known`: the turn's ruled values, never remembered."""
    if memories is None or user_id is None:
        return {}
    return {
        "memory": HandlerMemory(
            memories=memories,
            user_id=user_id,
            conversation_id=question.conversation_id,
            message_id=question.id,
            recorder=recorder,
            known=known or {},
        )
    }


class LongTermMemory:
    """`Orchestrator.memory`: the users' long-term facts (docs/memory.md), each kept by one
    profile: `profile=NAME` picks whose (`None`: the orchestrator's default profile, its
    only one or its first). Each method opens the orchestrator on first use."""

    def __init__(
        self,
        opened: Callable[[str | None], Awaitable[Memories]],
        now: Callable[[str | None], Memories],
    ) -> None:
        """`opened`: a profile's memory, the orchestrator opened on first call; `now`: the
        same, once open (`store`)."""
        self._opened = opened
        self._now = now

    @property
    def store(self) -> MemoryStore:
        """The default profile's memory table (once the orchestrator is open)."""
        return self._now(None).store

    async def remember(
        self,
        user_id: str,
        text: str,
        key: str | None = None,
        *,
        source: MemorySource = "user",
        trust: MemoryTrust = "verified",
        profile: str | None = None,
    ) -> Memory:
        """Remember a fact about `user_id` from the very next turn on (of `profile`'s
        conversations only).

        Args:
            user_id: Whose fact it is.
            text: The fact, e.g. "Prefers replies in Hindi" (at most 500 characters).
            key: Facts with the same key supersede one another (the newest wins).
            source: Who states it: `user` (through the application), `operator`,
                `handler` or `memory_expert`.
            trust: `verified` (the default: the application writes it, as the business's
                record) or `customer` (passed on as the customer's own, unverified word).
            profile: Which business keeps it (`None`: the default profile).

        Raises:
            InvalidInput: empty or over-long text, an unknown source or trust.
            ConfigError: no profile of that name.
        """
        memories = await self._opened(profile)
        return await memories.write(user_id, text, key=key, source=source, trust=trust)

    async def recall(
        self, user_id: str, query: str | None = None, *, profile: str | None = None
    ) -> list[Memory]:
        """The current facts `profile` keeps about `user_id`: all of them, the most
        recently updated first (past conversations are not facts: `past_conversations`);
        or, with `query`, what a turn about it would be given, best first."""
        memories = await self._opened(profile)
        if query is None:
            current = await memories.store.current(user_id)
            return [m for m in current if not m.is_past_conversation]
        return await memories.recall(user_id, query)

    async def past_conversations(self, user_id: str, *, profile: str | None = None) -> list[Memory]:
        """The kept summaries of `user_id`'s past conversations with `profile`, the newest
        first (each with its `conversation_id`; `forget` deletes one, erasure all)."""
        current = await (await self._opened(profile)).store.current(user_id)
        return [m for m in current if m.is_past_conversation]

    async def correct(
        self,
        user_id: str,
        memory_id: str,
        text: str,
        *,
        by: str = "user",
        profile: str | None = None,
    ) -> Memory:
        """Replace the text of one of the user's facts, from the very next turn on.

        Raises:
            MemoryNotFound: no current fact `memory_id` of `user_id` kept by `profile`.
        """
        memories = await self._opened(profile)
        memory = await memories.store.correct(user_id, memory_id, text)
        payload: dict[str, object] = {"memory_id": memory_id, "by": by}
        await memories.note_for_user(user_id, "memory_corrected", payload)
        return memory

    async def forget(
        self, user_id: str, memory_id: str, *, by: str = "user", profile: str | None = None
    ) -> None:
        """Delete one of the user's facts (and the older versions it replaced): its text is
        gone from the database; the audit log records only that it was forgotten.

        `by` says who asked (`user`, `operator:ID`, `cli`), for the audit event; the
        event never holds the text (nor the user id: the chain is keyed by a digest).

        Raises:
            MemoryNotFound: no current fact `memory_id` of `user_id` kept by `profile`.
        """
        memories = await self._opened(profile)
        ids = await memories.store.forget(user_id, memory_id)
        payload = {"memory_ids": ids, "by": by, "all": False}
        await memories.note_for_user(user_id, "memory_forgotten", payload)

    async def forget_all(
        self, user_id: str, *, by: str = "user", profile: str | None = None
    ) -> int:
        """Delete every fact `profile` keeps about `user_id`; returns how many current facts
        were forgotten (`privacy.erase_user` erases those of every profile)."""
        memories = await self._opened(profile)
        count, ids = await memories.store.forget_all(user_id)
        if ids:
            payload = {"memory_ids": ids, "by": by, "all": True}
            await memories.note_for_user(user_id, "memory_forgotten", payload)
        return count

    async def wait(self, within: float = CLOSE_TIMEOUT) -> int:
        """Wait, at most `within` seconds, for the learning recorded so far; how many
        jobs are left (0: every fact said so far is learnt). See `Memories.wait`."""
        return await (await self._opened(None)).wait(within)
