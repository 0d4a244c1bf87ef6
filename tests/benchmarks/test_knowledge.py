"""The knowledge benchmark: its labelled set is what it claims, and its measurements run."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

from benchmarks.knowledge import (
    HASHED,
    EmbeddingServer,
    _sqlite_urls,
    backend,
    hashed_features,
    labelled_set,
    table,
    turn_times,
)
from frontdesk.threads.knowledge import split_passages


def test_the_labelled_set_has_enough_passages_and_every_label_names_one() -> None:
    pages, questions = labelled_set()
    passages = {(name, s.title) for name, text in pages.items() for s in split_passages(name, text)}
    assert len(passages) >= 30 and len(questions) >= 60
    assert {(q.source, q.title) for q in questions} <= passages
    # Phrased as customers ask, not copied: no question is a passage's own sentence.
    texts = " ".join(pages.values()).lower()
    assert all(q.question.lower().rstrip("?!. ") not in texts for q in questions)


def test_the_stand_in_embeddings_are_deterministic_unit_vectors() -> None:
    first, again = hashed_features("Lost my card"), hashed_features("Lost my card")
    assert first == again and math.isclose(sum(x * x for x in first), 1.0)
    assert hashed_features("lost card") != hashed_features("savings rate")


def test_the_benchmark_measures_recall_lookups_and_tokens(tmp_path: Path) -> None:
    with EmbeddingServer() as server:
        figures = asyncio.run(backend(_sqlite_urls(tmp_path), server.url, [HASHED]))
    for ranking in (figures["full text"], figures["combined"][HASHED]):
        assert 0.3 < ranking["recall@1"] <= ranking["recall@3"] <= 1.0
    assert figures["lookup 10"] > 0 and figures["lookup 10000"] > 0
    assert 0 < figures["tokens"]["mean"] <= figures["tokens"]["max"] <= 2_000 + 40
    assert "| SQLite | full text |" in table({"SQLite": figures}, [HASHED])


def test_turn_times_compare_turns_with_and_without_knowledge(tmp_path: Path) -> None:
    times = asyncio.run(turn_times(tmp_path, 2))
    assert times["knowledge_ms"] > 0 and times["none_ms"] > 0 and times["ratio"] > 0
