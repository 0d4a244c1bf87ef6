"""The knowledge store: passages at headings, versions that follow changes, ranked search."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from frontdesk.errors import InvalidInput
from frontdesk.knowledge import MAX_PASSAGE_CHARS
from frontdesk.threads import knowledge
from frontdesk.threads.knowledge import (
    FullTextPassageRetriever,
    KnowledgeStore,
    split_passages,
)
from frontdesk.threads.store import ConversationStore
from tests._pg import create_database, drop_database

pytestmark = pytest.mark.anyio

FEES = """# Fees

## Overdraft fees
An arranged overdraft costs 39.9% EAR. Going over by less than 10 pounds is free.

## International transfers
Sending money abroad costs 5 pounds per transfer, plus the exchange rate margin.

## Card replacement
A lost or stolen card is replaced free of charge once a year.
"""


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KnowledgeStore]:
    url = f"sqlite:///{tmp_path / 'knowledge.db'}"
    if request.param == "postgresql":
        url = create_database()
    conversations = await ConversationStore.open(url)
    try:
        yield KnowledgeStore(conversations.engine)
    finally:
        await conversations.aclose()
        if request.param == "postgresql":
            drop_database(url)


def test_markdown_is_split_at_headings_and_fences_are_kept_whole() -> None:
    text = (
        "intro line\n\n# Top\n\n## A\nalpha\n```\n# not a heading\n```\n## Empty\n### B ###\nbeta\n"
    )
    sections = split_passages("guide.md", text)
    assert [(s.title, s.text) for s in sections] == [
        ("guide.md", "intro line"),
        ("A", "alpha\n```\n# not a heading\n```"),
        ("B", "beta"),
    ]


def test_plain_text_is_split_at_blank_lines() -> None:
    text = "Opening hours are nine to five\non weekdays.\n\n\nBranches close on bank holidays."
    sections = split_passages("hours.txt", text)
    assert [s.text for s in sections] == [
        "Opening hours are nine to five on weekdays.",
        "Branches close on bank holidays.",
    ]
    assert sections[0].title == "Opening hours are nine to five on weekdays."


def test_a_long_section_is_cut_at_its_paragraphs() -> None:
    paragraph = "word " * 200
    text = "## Long\n" + "\n\n".join(paragraph.strip() for _ in range(8))
    sections = split_passages("long.md", text)
    assert len(sections) > 1
    assert all(len(s.text) <= MAX_PASSAGE_CHARS for s in sections)
    assert sections[0].title == "Long" and sections[1].title == "Long (part 2)"


async def test_adding_a_source_stores_one_passage_per_section(store: KnowledgeStore) -> None:
    passages = await store.add("help/fees.md", FEES)
    assert [p.title for p in passages] == [
        "Overdraft fees",
        "International transfers",
        "Card replacement",
    ]
    assert {p.version for p in passages} == {1} and len({p.id for p in passages}) == 3
    assert all(len(p.sha256) == 64 for p in passages)
    assert await store.sources() == ["help/fees.md"]
    assert [p.id for p in await store.passages("help/fees.md")] == [p.id for p in passages]


async def test_re_adding_keeps_ids_and_versions_only_what_changed(store: KnowledgeStore) -> None:
    first = {p.title: p for p in await store.add("help/fees.md", FEES)}
    changed = FEES.replace("5 pounds per transfer", "7 pounds per transfer")
    changed = changed.replace(
        "## Card replacement", "## New accounts\nOpen one online.\n\n## Card replacement"
    )
    second = {p.title: p for p in await store.add("help/fees.md", changed)}
    assert second["Overdraft fees"] == first["Overdraft fees"]
    transfers = second["International transfers"]
    assert transfers.id == first["International transfers"].id and transfers.version == 2
    assert transfers.sha256 != first["International transfers"].sha256
    assert second["Card replacement"] == first["Card replacement"]
    assert second["New accounts"].version == 1
    assert [p.title for p in await store.passages("help/fees.md")] == [
        "Overdraft fees",
        "International transfers",
        "New accounts",
        "Card replacement",
    ]
    third = await store.add("help/fees.md", "## Overdraft fees\nGone up.")
    assert [(p.id, p.version) for p in third] == [(first["Overdraft fees"].id, 2)]
    assert len(await store.passages()) == 1


async def test_search_ranks_the_matching_passage_first(store: KnowledgeStore) -> None:
    await store.add("help/fees.md", FEES)
    await store.add("help/hours.txt", "Branches open at nine.\n\nThe phone line never closes.")
    retriever = FullTextPassageRetriever(store)
    found = await retriever.retrieve("How much does it cost to send money abroad?", limit=5)
    assert found[0].title == "International transfers"
    assert found[0].score > 0 and [p.score for p in found] == sorted(
        (p.score for p in found), reverse=True
    )
    stolen = await retriever.retrieve("my card was stolen", limit=1)
    assert [p.title for p in stolen] == ["Card replacement"]
    assert await retriever.retrieve("the of and", limit=5) == []
    assert await retriever.retrieve('"; DROP TABLE knowledge_passage; --', limit=5) == []


async def test_a_common_word_ranks_a_bounded_set_and_keeps_the_passage_with_every_word(
    store: KnowledgeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.add("help/abroad.md", "## Card abroad\nPaying by card abroad costs no fee.")
    cards = "".join(f"## Card {n}\nCard {n} is one of our card designs.\n\n" for n in range(6))
    await store.add("help/cards.md", cards)  # Newer: first in the index's order.
    retriever = FullTextPassageRetriever(store)
    everything = await retriever.retrieve("card abroad", limit=10)
    assert len(everything) == 7 and everything[0].title == "Card abroad"

    monkeypatch.setattr(knowledge, "PASSAGES_RANKED", 2)
    bounded = await retriever.retrieve("card abroad", limit=10)
    # At most 2 of those with any word, and the one with every word (of at most 2).
    assert 2 <= len(bounded) <= 3
    assert bounded[0].title == "Card abroad" and bounded[0].score == everything[0].score


async def test_remove_deletes_the_source_and_its_index_entries(store: KnowledgeStore) -> None:
    await store.add("help/fees.md", FEES)
    await store.add("help/other.md", "## Other\nNothing about money abroad.")
    assert await store.remove("help/fees.md") == 3
    assert await store.remove("help/fees.md") == 0
    assert await store.sources() == ["help/other.md"]
    found = await FullTextPassageRetriever(store).retrieve("international transfers", limit=5)
    assert [p.source for p in found] == []
    async with store.engine.connect() as conn:
        count = (await conn.execute(sa.text("SELECT count(*) FROM knowledge_passage"))).scalar()
    assert count == 1


async def test_bad_sources_and_texts_are_refused(store: KnowledgeStore) -> None:
    with pytest.raises(InvalidInput, match="no text"):
        await store.add("help/empty.md", "  \n\n # \n")
    with pytest.raises(InvalidInput):
        await store.add("", FEES)
    with pytest.raises(InvalidInput, match="NUL"):
        await store.add("help/nul.md", "## A\nnul\x00here")
    with pytest.raises(InvalidInput, match="spaces"):
        await store.add(" help.md", FEES)
    assert await store.sources() == []


async def test_vectors_are_kept_by_model_and_hash(store: KnowledgeStore) -> None:
    passages = await store.add("help/fees.md", FEES)
    await store.save_vectors("m", {passages[0].sha256: [0.6, 0.8]})
    await store.save_vectors("m", {passages[0].sha256: [1.0, 0.0]})  # Kept as it was.
    vectors = await store.vectors("m")
    assert list(vectors) == [passages[0].sha256]
    assert [round(x, 3) for x in vectors[passages[0].sha256]] == [0.6, 0.8]
    assert await store.vectors("other") == {}
    await store.add("help/fees.md", FEES.replace("39.9%", "40%"))  # Its text changed.
    assert await store.vectors("m") == {}
