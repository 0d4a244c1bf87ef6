"""Knowledge retrieval: recall on a labelled bank help set, lookup time, tokens, turn time.

The labelled set (benchmarks/data): six help pages of a bank (`bank_help/*.md`, 34 `##`
sections, so 34 passages) and 68 questions phrased as customers ask them, each labelled
with the one passage that answers it (`bank_questions.json`).

- **Recall@1 / recall@3**: the share of questions whose labelled passage comes first / in
  the first three, for full text alone (`FullTextPassageRetriever`) and combined with
  embeddings (`HybridRetriever`, reciprocal rank fusion), on SQLite and PostgreSQL. The
  embeddings come from a deterministic local server started here, LABELLED AS SUCH: hashed
  word and character-trigram features, no semantic model (it catches spelling variants,
  not synonyms), served over HTTP on the OpenAI embeddings wire format and read through
  the real `openai` SDK, so that the whole path is exercised.
- **Lookup time**: one `retrieve` (its own read transaction) with 10 and with 10,000
  passages on each backend (the 10,000 are the help pages' sentences recombined), median
  over the questions.
- **Tokens added per call**: the reference block the response expert is sent per turn,
  after its `documents` allowance (default budget), counted with the default estimator.
- **Turn time with and without knowledge**: the whole pipeline with instant `FunctionModel`
  experts on a SQLite file, one orchestrator with the 34 passages, one without any, turns
  interleaved (medians and the ratio).

    python -m benchmarks.knowledge [--pg URL | --no-pg] [--turns 60]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import math
import os
import random
import re
import statistics
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from benchmarks.turns import PG_DEFAULT, _reachable, pg_database
from frontdesk.experts import Category, Outcome
from frontdesk.experts.category import HandlerContext
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.experts.providers.embeddings import OpenAIEmbedder
from frontdesk.knowledge import Passage
from frontdesk.orchestrator.knowledge import HybridRetriever, ranked
from frontdesk.threads.budget import DEFAULT_BUDGETS, Fit
from frontdesk.threads.knowledge import (
    FullTextPassageRetriever,
    KnowledgeStore,
    PassageRetriever,
    passage_table,
    split_passages,
)
from frontdesk.threads.models import utcnow
from frontdesk.threads.store import ConversationStore
from frontdesk.threads.tokens import EstimatingCounter

DATA = Path(__file__).resolve().parent / "data"
HELP = DATA / "bank_help"
QUESTIONS = DATA / "bank_questions.json"
DIMENSIONS = 512


@dataclass(frozen=True)
class Labelled:
    """One question and the passage that answers it."""

    question: str
    source: str
    title: str


def labelled_set() -> tuple[dict[str, str], list[Labelled]]:
    """The help pages (source name -> Markdown) and the labelled questions."""
    pages = {p.name: p.read_text(encoding="utf-8") for p in sorted(HELP.glob("*.md"))}
    raw = json.loads(QUESTIONS.read_text(encoding="utf-8"))
    return pages, [Labelled(q["q"], q["source"], q["title"]) for q in raw]


# -- the local embedding server (deterministic, no model) ---------------------------------


def hashed_features(text: str) -> list[float]:
    """Words and character trigrams hashed into `DIMENSIONS` buckets (md5: the same in
    every process), unit length. Not a semantic model: a stand-in labelled as such."""
    vector = [0.0] * DIMENSIONS
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        features = [f"w:{word}"] + [f"t:{word[i : i + 3]}" for i in range(max(1, len(word) - 2))]
        for feature in features:
            digest = hashlib.md5(feature.encode()).digest()
            bucket = int.from_bytes(digest[:4], "little") % DIMENSIONS
            vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


class EmbeddingServer:
    """`POST /v1/embeddings` answered with `hashed_features`, on 127.0.0.1 (a thread)."""

    def __init__(self) -> None:
        app = Starlette(routes=[Route("/v1/embeddings", self._embed, methods=["POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.url = ""

    async def _embed(self, request: Request) -> JSONResponse:
        body = await request.json()
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_features(t)}
            for i, t in enumerate(texts)
        ]
        return JSONResponse({"object": "list", "data": data, "model": body["model"], "usage": {}})

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    def __exit__(self, *_: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


# -- measurements -------------------------------------------------------------------------


async def recall(retriever: PassageRetriever, questions: list[Labelled]) -> dict[str, float]:
    """Recall@1 and recall@3 of `retriever` over the labelled questions."""
    at1 = at3 = 0
    for item in questions:
        found = await retriever.retrieve(item.question, limit=3)
        hits = [(p.source, p.title) == (item.source, item.title) for p in found]
        at1 += bool(hits[:1] and hits[0])
        at3 += any(hits)
    return {"recall@1": at1 / len(questions), "recall@3": at3 / len(questions)}


def _synthetic(count: int, pages: dict[str, str]) -> list[dict[str, Any]]:
    """`count` passages made of the help pages' sentences, recombined."""
    sentences = [
        s.strip()
        for text in pages.values()
        for s in re.split(r"(?<=[.!?])\s+", re.sub(r"#.*\n", "", text))
        if len(s.split()) > 4
    ]
    rng, now = random.Random(count), utcnow()
    rows = []
    for i in range(count):
        body = " ".join(rng.sample(sentences, 3))
        rows.append(
            {
                "id": f"{i:032x}",
                "source": f"synthetic/{i // 50}.md",
                "position": i % 50,
                "title": " ".join(rng.sample(body.split(), 3)),
                "text": body,
                "version": 1,
                "sha256": hashlib.sha256(body.encode()).hexdigest(),
                "created_at": now,
                "updated_at": now,
            }
        )
    return rows


async def _seed(store: KnowledgeStore, rows: list[dict[str, Any]]) -> None:
    async with store.engine.begin() as conn:
        for start in range(0, len(rows), 1_000):
            await conn.execute(passage_table.insert(), rows[start : start + 1_000])


async def lookup_ms(retriever: PassageRetriever, questions: list[Labelled]) -> float:
    """Median milliseconds of one lookup (after one untimed warm-up pass)."""
    for item in questions[:5]:
        await retriever.retrieve(item.question, limit=5)
    times = []
    for item in questions:
        started = time.perf_counter()
        await retriever.retrieve(item.question, limit=5)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def tokens_per_call(found: list[list[Passage]]) -> dict[str, float]:
    """Tokens of the reference block the response expert is sent, after its budget."""
    budget, counter = DEFAULT_BUDGETS["response"], EstimatingCounter()
    sent = []
    for passages in found:
        fit: Fit[Any] = budget.fit(counter=counter, history=[], documents=ranked(passages))
        sent.append(fit.tokens["documents"] + (counter.count(_label()) if fit.documents else 0))
    return {"mean": statistics.mean(sent), "max": float(max(sent))}


def _label() -> str:
    from frontdesk.labels import DOCUMENTS_LABEL

    return DOCUMENTS_LABEL


async def backend(url_for: Callable[[], Any], embed_url: str) -> dict[str, Any]:
    """Every retrieval figure on one backend (`url_for()`: a fresh database each time)."""
    pages, questions = labelled_set()
    out: dict[str, Any] = {}
    async with url_for() as url:
        conversations = await ConversationStore.open(url)
        store = KnowledgeStore(conversations.engine)
        embedder = OpenAIEmbedder("hashed-features-512", base_url=embed_url)
        try:
            for name, text in pages.items():
                await store.add(name, text)
            full_text = FullTextPassageRetriever(store)
            hybrid = HybridRetriever(store=store, embedder=embedder)
            out["full text"] = await recall(full_text, questions)
            out["combined"] = await recall(hybrid, questions)
            found = [await full_text.retrieve(q.question, limit=8) for q in questions]
            out["tokens"] = tokens_per_call(found)
            out["lookup 34"] = await lookup_ms(full_text, questions)
            out["lookup combined 34"] = await lookup_ms(hybrid, questions)
        finally:
            await embedder.aclose()
            await conversations.aclose()
    for size in (10, 10_000):
        async with url_for() as url:
            conversations = await ConversationStore.open(url)
            store = KnowledgeStore(conversations.engine)
            try:
                await _seed(store, _synthetic(size, pages))
                out[f"lookup {size}"] = await lookup_ms(FullTextPassageRetriever(store), questions)
            finally:
                await conversations.aclose()
    return out


# -- turn time ----------------------------------------------------------------------------


class _Ask(BaseModel):
    """What the request expert extracts (nothing: a policy question)."""

    topic: str = "fees"


async def _answer(request: BaseModel, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Answer the question from the reference passages.")


POLICY = Category(
    name="POLICY", description="Questions about the bank's policies", request=_Ask, handler=_answer
)


def _team(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "POLICY", "reason": "a policy question"}
    if request.expert == "request":
        return {"request": {"topic": "fees"}}
    if request.expert == "memory":
        return {"facts": []}
    return "Here is what our help pages say."


async def turn_times(folder: Path, turns: int) -> dict[str, float]:
    """Median turn times with the 34 passages and with none, turns interleaved."""
    from frontdesk.orchestrator import Orchestrator

    pages, questions = labelled_set()
    orchs = {
        kind: Orchestrator(
            [POLICY],
            model=FunctionModel(_team),
            store=f"sqlite:///{folder / f'turns-{kind}.db'}",
            speculate=False,
            memory=False,
        )
        for kind in ("knowledge", "none")
    }
    times: dict[str, list[float]] = {"knowledge": [], "none": []}
    try:
        for orch in orchs.values():
            await orch.open()
        for name, text in pages.items():
            await orchs["knowledge"].knowledge.add(name, text)
        for i in range(turns + 5):  # The first five of each warm the caches.
            question = questions[i % len(questions)].question
            order = list(orchs.items()) if i % 2 else list(reversed(orchs.items()))
            for kind, orch in order:
                started = time.perf_counter()
                await orch.handle(f"{kind}-{i}", question, user_id="bench-user")
                if i >= 5:
                    times[kind].append((time.perf_counter() - started) * 1000)
    finally:
        for orch in orchs.values():
            await orch.aclose()
    with_, without = statistics.median(times["knowledge"]), statistics.median(times["none"])
    return {"knowledge_ms": with_, "none_ms": without, "ratio": with_ / without}


# -- report -------------------------------------------------------------------------------


def _sqlite_urls(folder: Path) -> Callable[[], Any]:
    counter = iter(range(1_000))

    @asynccontextmanager
    async def url_for() -> AsyncIterator[str]:
        yield f"sqlite:///{folder / f'knowledge-{next(counter)}.db'}"

    return url_for


def table(results: dict[str, dict[str, Any]]) -> str:
    """The figures as Markdown rows, one per backend."""
    rows = [
        "| backend | recall@1 full text | recall@3 full text | recall@1 combined |"
        " recall@3 combined | lookup, 10 passages (ms) | lookup, 10,000 passages (ms) |"
        " lookup combined, 34 passages (ms) | reference tokens per response call (mean / max) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, f in results.items():
        rows.append(
            f"| {name} | {f['full text']['recall@1']:.2f} | {f['full text']['recall@3']:.2f} |"
            f" {f['combined']['recall@1']:.2f} | {f['combined']['recall@3']:.2f} |"
            f" {f['lookup 10']:.2f} | {f['lookup 10000']:.2f} | {f['lookup combined 34']:.2f} |"
            f" {f['tokens']['mean']:.0f} / {f['tokens']['max']:.0f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    """Run every measurement and print Markdown tables."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.knowledge")
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--pg", default=os.environ.get("FRONTDESK_BENCH_PG_URL", PG_DEFAULT))
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args(argv)
    pages, questions = labelled_set()
    print(
        f"{sum(len(split_passages(n, t)) for n, t in pages.items())} passages,"
        f" {len(questions)} labelled questions; 'combined' = full text + a deterministic"
        " local embedding server (hashed word and trigram features, not a semantic model)"
    )
    results: dict[str, dict[str, Any]] = {}
    with EmbeddingServer() as server, tempfile.TemporaryDirectory(prefix="fd-kn-") as folder:
        results["SQLite"] = asyncio.run(backend(_sqlite_urls(Path(folder)), server.url))
        if not args.no_pg:
            problem = asyncio.run(_reachable(args.pg))
            if problem is None:
                results["PostgreSQL"] = asyncio.run(
                    backend(lambda: pg_database(args.pg), server.url)
                )
            else:
                print(f"PostgreSQL skipped: {problem}")
        print(table(results), flush=True)
        turns = asyncio.run(turn_times(Path(folder), args.turns))
    print()
    print("| turn without knowledge (ms) | turn with knowledge (ms) | ratio |")
    print("|---:|---:|---:|")
    print(f"| {turns['none_ms']:.2f} | {turns['knowledge_ms']:.2f} | {turns['ratio']:.2f}x |")


if __name__ == "__main__":
    main()
