"""Knowledge in a turn: the business's passages for the question, fitted and sent as reference.

`Orchestrator.knowledge` is a `Knowledge`: `add`, `remove`, `search` and `sources` over the
store (`threads.knowledge.KnowledgeStore`). In a turn the passages for the user's question
are looked up in the turn's first transaction (`reader`) when the retriever is the
database's own, ranked (`ranked`) and cut to the response expert's `documents` allowance
(lowest-ranked first) by its budget; `with_documents` then puts what was kept after the
question, in the request's last user turn, headed by `frontdesk.labels.DOCUMENTS_LABEL`:
reference text, never an instruction, never in the thread, and after everything the
cached prefix holds (system prompt, memory, earlier turns), so that a new set of passages
each turn never breaks the provider's prompt cache. Every passage's text goes through
`neutralise`, so that a document cannot pass itself off as the system's label.

`HybridRetriever` adds an optional embeddings endpoint (`experts.providers.embeddings`):
the full-text and the vector rankings are combined by reciprocal rank fusion; an endpoint
that fails leaves the full-text ranking alone.
"""

from __future__ import annotations

import array
import dataclasses
import functools
import math
import operator
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from frontdesk._driver import savepoint
from frontdesk.db import Connection
from frontdesk.errors import FrontdeskError, InvalidInput
from frontdesk.experts.citations import CITE_NOTE
from frontdesk.experts.providers import Message
from frontdesk.experts.providers.embeddings import Embedder
from frontdesk.knowledge import Passage
from frontdesk.labels import DOCUMENTS_LABEL, neutralise
from frontdesk.memory import Memory
from frontdesk.orchestrator._recorder import passage_ref
from frontdesk.threads.budget import Document
from frontdesk.threads.knowledge import (
    MAX_SEARCH_LIMIT,
    FullTextPassageRetriever,
    KnowledgeStore,
    PassageRetriever,
)

__all__ = [
    "LOOKUP_LIMIT",
    "HybridRetriever",
    "Knowledge",
    "Library",
    "entry",
    "ranked",
    "with_documents",
]

log = structlog.get_logger("frontdesk.knowledge")

LOOKUP_LIMIT = 8
"""Passages looked up per turn at most (the budget keeps those that fit, best first)."""
RRF_K = 60
"""The constant of reciprocal rank fusion (the usual 60: ranks deep in a list count little)."""
DEPTH = 50
"""How deep each ranking is read before the two are fused."""


RECHECK_EMPTY = 30.0
"""Seconds an empty library is taken as still empty before it is counted again: documents
added by another process (`frontdesk knowledge add` beside a running service) reach its
turns within this time; those added through this process's `Knowledge`, at once."""


class _Changes:
    """How many times this process added or removed documents (any library's): a library
    seen empty before the latest change is counted again."""

    count = 0


@dataclass
class _Seen:
    """What a library's last count found, and when (`time.monotonic()`)."""

    empty: bool = False
    at: float = -math.inf
    changes: int = -1


@dataclass(frozen=True)
class Library:
    """The opened knowledge: its store, and the retriever every turn and search uses."""

    store: KnowledgeStore
    retriever: PassageRetriever
    _seen: _Seen = field(default_factory=_Seen, compare=False, repr=False)

    async def empty(self) -> bool:
        """Whether the library holds no passage, so a turn looks nothing up (most apps
        have no documents: their turns should not search). One count on first use, and
        every `RECHECK_EMPTY` seconds while it is empty; a library with passages is not
        counted again until this process changes one (a turn then searches as before,
        and finds nothing once they are all gone). A count that fails says not empty:
        the lookup then fails as it would have, costing the turn its passages only."""
        seen, changes = self._seen, _Changes.count
        if seen.changes == changes and (
            not seen.empty or time.monotonic() - seen.at < RECHECK_EMPTY
        ):
            return seen.empty
        try:
            count = (await self.store.stamp())[0]
        except Exception as e:
            log.warning("knowledge.lookup_failed", error=type(e).__name__)
            return False
        seen.empty, seen.at, seen.changes = count == 0, time.monotonic(), changes
        return seen.empty

    async def lookup(self, question: str) -> list[Passage]:
        """A turn's passages for `question`; a lookup that fails costs the turn its
        passages, never the turn."""
        try:
            return await self.retriever.retrieve(question, limit=LOOKUP_LIMIT)
        except Exception as e:
            log.warning("knowledge.lookup_failed", error=type(e).__name__)
            return []

    def reader(self, question: str) -> Callable[[Connection], list[Passage]] | None:
        """The lookup as a read of the turn's first transaction (no extra round trip), or
        `None` for a retriever that is not the database's own (the turn calls `lookup`)."""
        if not isinstance(self.retriever, FullTextPassageRetriever):
            return None
        retriever = self.retriever

        def read(conn: Connection) -> list[Passage]:
            try:
                with savepoint(conn):  # A failed lookup leaves the turn's writes intact.
                    return retriever.retrieve_sync(conn, question, limit=LOOKUP_LIMIT)
            except Exception as e:
                log.warning("knowledge.lookup_failed", error=type(e).__name__)
                return []

        return read


class Knowledge:
    """`Orchestrator.knowledge`: the businesses' documents, searchable by their turns.

    Each method works on one profile's library (`profile=NAME`: the documents that
    profile's turns read, `Profile.knowledge_source`; `None`: the default profile's), and
    opens the orchestrator's store on first use (as `handle` does), so no `open()` is
    needed before adding documents.

    Raises (every method):
        ConfigError: no profile of that name.
    """

    def __init__(self, opened: Callable[[str | None], Awaitable[Library]]) -> None:
        """`opened`: a profile's store and retriever, the orchestrator opened on first call."""
        self._opened = opened

    async def add(self, source: str, text: str, *, profile: str | None = None) -> int:
        """Store `text` as the passages of `source` (replacing what it held: unchanged
        passages keep their id and version, changed ones their id with the next version);
        returns how many passages it holds now.

        Raises:
            InvalidInput: an empty or over-long text, a bad source name.
        """
        library = await self._opened(profile)
        try:
            return len(await library.store.add(source, text))
        finally:
            _Changes.count += 1  # Every library counts again: profiles may share one.

    async def remove(self, source: str, *, profile: str | None = None) -> int:
        """Delete the passages of `source`; how many there were (0 for an unknown source)."""
        library = await self._opened(profile)
        try:
            return await library.store.remove(source)
        finally:
            _Changes.count += 1

    async def search(
        self, query: str, limit: int = 5, *, profile: str | None = None
    ) -> list[Passage]:
        """The passages most relevant to `query`, best first (as a turn would find them).

        Raises:
            InvalidInput: `limit` outside 1 to `MAX_SEARCH_LIMIT`, or `query` not a str.
        """
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise InvalidInput(f"limit must be a whole number, got {limit!r}")
        if not 0 < limit <= MAX_SEARCH_LIMIT:
            raise InvalidInput(f"limit must be 1 to {MAX_SEARCH_LIMIT}, got {limit}")
        if not isinstance(query, str):
            raise InvalidInput(f"query must be a str, not {type(query).__name__}")
        return await (await self._opened(profile)).retriever.retrieve(query, limit=limit)

    async def sources(self, *, profile: str | None = None) -> list[str]:
        """The names of the sources stored, sorted."""
        return await (await self._opened(profile)).store.sources()

    async def passages(
        self, source: str | None = None, *, profile: str | None = None
    ) -> list[Passage]:
        """The passages of `source` (of every source when `None`), in their order."""
        return await (await self._opened(profile)).store.passages(source)


@functools.lru_cache(maxsize=4096)
def entry(source: str, title: str, text: str) -> str:
    """One passage as sent: where it is from, then its text, no label of ours inside.

    Cached: a popular passage is sent turn after turn, and the label patterns cost."""
    return neutralise(f"[{source} - {title}]\n{text}")


def ranked(passages: Sequence[Passage]) -> list[Document]:
    """The passages as ranked budget items, best first (`Document.id` is the passage id)."""
    count = len(passages)
    return [
        Document(text=entry(p.source, p.title, p.text), rank=float(count - i), id=p.id)
        for i, p in enumerate(passages)
    ]


def kept(passages: Sequence[Passage], documents: Sequence[Document]) -> list[Passage]:
    """The passages behind the budget's kept `documents`, in their order."""
    by_id = {p.id: p for p in passages}
    return [by_id[d.id] for d in documents if d.id in by_id]


def block(documents: Sequence[Document], *, cite: bool = False) -> str:
    """The reference block: the label, then each kept passage under its number (`[1]`,
    what a reply cites it by), empty when none; with `cite`, the line asking the response
    expert to cite them (`experts.citations.CITE_NOTE`) after the label."""
    if not documents:
        return ""
    head = f"{DOCUMENTS_LABEL}\n{CITE_NOTE}" if cite else DOCUMENTS_LABEL
    return "\n\n".join([head, *(f"[{i}] {d.text}" for i, d in enumerate(documents, 1))])


def with_documents(
    messages: Sequence[Message], documents: Sequence[Document], *, cite: bool = False
) -> list[Message]:
    """`messages` with the reference block after the question, in the last user turn.

    The block is never a turn of its own (the thread alternates) and never before the
    cached prefix: only the last user turn, which no cache covers, changes.
    """
    out = list(messages)
    text = block(documents, cite=cite)
    if not text:
        return out
    for i in range(len(out) - 1, -1, -1):
        if out[i]["role"] == "user":
            out[i] = Message(role="user", content=f"{out[i]['content']}\n\n{text}")
            return out
    return [*out, Message(role="user", content=text)]


def fold(
    messages: Sequence[Message],
    passages: Sequence[Passage],
    documents: Sequence[Document],
    *,
    cite: bool = False,
) -> tuple[list[Message], tuple[Passage, ...]]:
    """`messages` with the kept `documents` after the question (numbered in their order,
    the order of the passages returned; `cite`: asked to be cited), and the passages they
    are (what the request records for the audit log and `Reply.sources`)."""
    return with_documents(messages, documents, cite=cite), tuple(kept(passages, documents))


def cited(sent: Sequence[Passage], refs: Sequence[str]) -> tuple[list[Passage], list[str]]:
    """The passages a reply cites (`refs`: the numbers it wrote, `experts.citations`),
    checked against those it was `sent` (numbered from 1 in their order), first cited
    first; and the refs no passage was sent under (dropped: the audit names them)."""
    out: list[Passage] = []
    dropped: list[str] = []
    for ref in refs:
        number = int(ref) if ref.isdigit() else 0
        if not 1 <= number <= len(sent):
            dropped.append(ref)
        elif sent[number - 1] not in out:
            out.append(sent[number - 1])
    return out, dropped


def citation_payload(sent: Sequence[Passage], refs: Sequence[str]) -> dict[str, Any]:
    """What the turn's `reply` audit event records of its citations: the cited passages'
    ids and versions, and the refs dropped (none of the keys for a reply sent no passage
    and citing nothing)."""
    if not sent and not refs:
        return {}
    found, dropped = cited(sent, refs)
    payload: dict[str, Any] = {"citations": [passage_ref(p) for p in found]}
    if dropped:
        payload["citations_dropped"] = dropped
        log.info("knowledge.citations_dropped", dropped=len(dropped), sent=len(sent))
    return payload


def to_json(passages: Sequence[Passage], citations: Sequence[Passage] = ()) -> list[dict[str, Any]]:
    """Passages as the turn's stored outcome keeps them (`Reply.sources` of a replay),
    each cited one marked `"cited": n` (its place among the citations, from 1)."""
    order = {p.id: i for i, p in enumerate(citations, 1)}
    out = []
    for p in passages:
        item = dataclasses.asdict(p)
        if p.id in order:
            item["cited"] = order[p.id]
        out.append(item)
    return out


def from_json(stored: Sequence[Mapping[str, Any]]) -> list[Passage]:
    """`to_json`'s passages back (fields this version does not know are left out)."""
    names = {f.name for f in dataclasses.fields(Passage)}
    return [Passage(**{k: v for k, v in item.items() if k in names}) for item in stored]


def citations_from_json(stored: Sequence[Mapping[str, Any]]) -> list[Passage]:
    """The cited passages of `to_json`'s list (`Reply.citations`), first cited first."""
    marked = sorted((int(item["cited"]), i) for i, item in enumerate(stored) if item.get("cited"))
    return from_json([stored[i] for _, i in marked])


@dataclass(frozen=True)
class FirstRead:
    """What a turn's first transaction looked up besides its own writes."""

    memories: list[Memory] | None = None
    passages: list[Passage] | None = None


def first_read(
    memory: Callable[[Connection], list[Memory]] | None,
    knowledge: Callable[[Connection], list[Passage]] | None,
) -> Callable[[Connection], FirstRead] | None:
    """The memory and knowledge lookups as one read of the turn's first transaction (`None`
    when there is neither: the start then reads nothing more)."""
    if memory is None and knowledge is None:
        return None

    def read(conn: Connection) -> FirstRead:
        return FirstRead(
            memories=None if memory is None else memory(conn),
            passages=None if knowledge is None else knowledge(conn),
        )

    return read


@dataclass
class HybridRetriever:
    """Full text and an embeddings endpoint, combined by reciprocal rank fusion.

    Vectors are kept by the passages' content hash (`knowledge_embedding`), so a passage is
    embedded once per model; this process keeps them in memory and reloads when the
    passages changed (`KnowledgeStore.stamp`). A question costs one call to the endpoint.
    """

    store: KnowledgeStore
    embedder: Embedder
    full_text: PassageRetriever | None = None
    _stamp: tuple[int, int, str] | None = None
    _passages: list[Passage] = field(default_factory=list)
    _vectors: dict[str, array.array[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.full_text is None:
            self.full_text = FullTextPassageRetriever(self.store)

    async def retrieve(self, query: str, *, limit: int) -> list[Passage]:
        """The passages best on both rankings first (`score`: the fused score)."""
        assert self.full_text is not None
        words = await self.full_text.retrieve(query, limit=DEPTH)
        try:
            await self.refresh()
            (vector,) = await self.embedder.embed([query])
        except FrontdeskError as e:  # The endpoint failed: the full text alone answers.
            log.warning("knowledge.embeddings_failed", error=type(e).__name__)
            return words[:limit]
        near = sorted(
            self._passages,
            key=lambda p: _dot(vector, self._vectors[p.sha256]),
            reverse=True,
        )[:DEPTH]
        fused: dict[str, float] = {}
        found: dict[str, Passage] = {}
        for ranking in (words, near):
            for rank, passage in enumerate(ranking):
                fused[passage.id] = fused.get(passage.id, 0.0) + 1.0 / (RRF_K + rank + 1)
                found.setdefault(passage.id, passage)
        best = sorted(fused, key=lambda i: fused[i], reverse=True)[:limit]
        return [replace(found[i], score=round(fused[i], 6)) for i in best]

    async def refresh(self) -> None:
        """Load the passages and their vectors when they changed; embed those that have
        none yet (and keep their vectors)."""
        stamp = await self.store.stamp()
        if stamp == self._stamp:
            return
        passages = await self.store.passages()
        vectors = await self.store.vectors(self.embedder.name)
        missing = list({p.sha256: p for p in passages if p.sha256 not in vectors}.values())
        if missing:
            made = await self.embedder.embed([f"{p.title}\n{p.text}" for p in missing])
            fresh = {p.sha256: v for p, v in zip(missing, made, strict=True)}
            await self.store.save_vectors(self.embedder.name, fresh)
            vectors.update({sha: array.array("f", v) for sha, v in fresh.items()})
        self._passages, self._vectors, self._stamp = passages, vectors, stamp


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return float(sum(map(operator.mul, a, b)))
