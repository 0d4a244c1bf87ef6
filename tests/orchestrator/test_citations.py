"""Citations: `Reply.citations` holds the passages the reply actually cites (the response
expert's `[n]` markers, checked against the passages sent: a number none was sent under is
dropped and audited), never the markers themselves; streamed, stored, replayed, in the
service's answer and `done` event, and in YAML conversation tests; SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from frontdesk.devkit.conversation_tests import load_file, run_files
from frontdesk.experts import Category, Outcome
from frontdesk.experts.category import HandlerContext
from frontdesk.experts.citations import CITE_NOTE, Cited, strip_citations
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.labels import DOCUMENTS_LABEL
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.stream import Delta, Done
from tests._pg import create_database, drop_database
from tests.orchestrator import _bank
from tests.service.conftest import auth, open_api

pytestmark = pytest.mark.anyio

FEES = """# Fees

## Overdraft fees
An arranged overdraft costs 39.9% EAR; the first 50 pounds are interest-free.

## International transfers
Sending money abroad costs a flat 3 pounds plus a 0.5% exchange margin.

## Card replacement
Your first replacement card each year is free; further ones cost 5 pounds.
"""


Q = "What are the fees to send money abroad, for an overdraft or a replacement card?"


class Ask(BaseModel):
    topic: str = "fees"


async def _answer(request: BaseModel, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Answer the question from the reference passages.")


POLICY = Category(
    name="POLICY", description="Questions about fees and policies", request=Ask, handler=_answer
)


def team(reply: Callable[[ModelRequest], str]) -> FunctionModel:
    def answer(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "POLICY", "reason": "a policy question"}
        if request.expert == "request":
            return {"request": {"topic": "fees"}}
        if request.expert == "memory":
            return {"facts": []}
        if request.expert == "summariser":
            return "summary"
        return reply(request)

    return FunctionModel(answer, chunk_chars=3)


def number_of(request: ModelRequest, title: str) -> int:
    """The number the passage titled `title` was sent under."""
    return [p.title for p in request.passages].index(title) + 1


def cites_transfers(request: ModelRequest) -> str:
    if not request.passages:
        return "It costs 3 pounds [1]."
    n = number_of(request, "International transfers")
    return f"It costs a flat 3 pounds [{n}] plus a margin [{n}, 9]. Anything else? [42]"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'citations.db'}"
        return
    made = create_database()
    try:
        yield made
    finally:
        drop_database(made)


async def test_the_reply_cites_what_it_used_and_unknown_numbers_are_dropped_and_audited(
    url: str,
) -> None:
    async with Orchestrator([POLICY], model=team(cites_transfers), store=url) as orch:
        await orch.knowledge.add("help/fees.md", FEES)
        reply = await orch.handle("c-1", Q, user_id="u")
        assert reply.text == "It costs a flat 3 pounds plus a margin. Anything else?"
        assert [p.title for p in reply.citations] == ["International transfers"]
        assert len(reply.sources) > 1  # What was sent stays `sources`.
        assert {p.id for p in reply.citations} <= {p.id for p in reply.sources}
        assert orch.audit_log is not None
        events = await orch.audit_log.events("c-1")
        (event,) = [e.payload for e in events if e.kind == "reply"]
        assert [c["id"] for c in event["citations"]] == [reply.citations[0].id]
        assert event["citations"][0]["version"] == 1
        assert event["citations_dropped"] == ["9", "42"]
        # The stored reply and thread hold no markers.
        transcript = await orch.transcript("c-1", user_id="u")
        assert transcript[-1].content == reply.text
        # A retry of the turn replays the same citations from what was stored.
        again = await orch.handle("c-1", Q, user_id="u")
        assert not again.replayed  # (a new message: no client id)
        first = await orch.handle("c-2", Q, user_id="u", client_message_id="m-1")
        replayed = await orch.handle("c-2", Q, user_id="u", client_message_id="m-1")
        assert replayed.replayed and replayed.citations == first.citations
        assert first.citations and first.citations[0].title == "International transfers"


async def test_the_response_expert_is_asked_for_citations_by_number(url: str) -> None:
    sent: list[ModelRequest] = []

    def reply(request: ModelRequest) -> str:
        sent.append(request)
        return "It costs 3 pounds."

    async with Orchestrator([POLICY], model=team(reply), store=url) as orch:
        await orch.knowledge.add("help/fees.md", FEES)
        reply_ = await orch.handle("c-1", Q, user_id="u")
        assert reply_.citations == [] and reply_.sources  # Sent, cited none: none shown.
        last_user = [m for m in sent[-1].messages if m["role"] == "user"][-1]["content"]
        block = last_user.split(DOCUMENTS_LABEL, 1)[1]
        assert block.startswith("\n" + CITE_NOTE + "\n\n[1] [help/fees.md - ")
        for i, passage in enumerate(sent[-1].passages, 1):
            assert f"[{i}] [{passage.source} - {passage.title}]" in block


async def test_a_reply_sent_no_passages_is_left_as_written(url: str) -> None:
    async with Orchestrator([POLICY], model=team(cites_transfers), store=url) as orch:
        reply = await orch.handle("c-1", Q, user_id="u")
        assert reply.sources == [] and reply.citations == []
        assert reply.text == "It costs 3 pounds [1]."  # No passage: not read for markers.
        assert orch.audit_log is not None
        (event,) = [e.payload for e in await orch.audit_log.events("c-1") if e.kind == "reply"]
        assert "citations" not in event


async def test_the_stream_never_shows_a_marker(url: str) -> None:
    async with Orchestrator([POLICY], model=team(cites_transfers), store=url) as orch:
        await orch.knowledge.add("help/fees.md", FEES)
        deltas: list[str] = []
        done = None
        async for event in orch.stream("c-1", Q, user_id="u"):
            if isinstance(event, Delta):
                deltas.append(event.text)
            elif isinstance(event, Done):
                done = event.reply
        assert done is not None and len(deltas) > 3
        assert "".join(deltas) == done.text
        assert not any("[" in d or "]" in d for d in deltas)
        assert [p.title for p in done.citations] == ["International transfers"]


def test_markers_come_out_the_same_whatever_the_pieces() -> None:
    text = "Fee £12 [1]. Also [2, 3] and [x] [], [1000] a[1]b, then [4"
    clean, refs = strip_citations(text)
    assert clean == "Fee £12. Also and [x] [], [1000] ab, then [4"
    assert refs == ["1", "2", "3"]
    for size in range(1, len(text) + 1):
        cited = Cited()
        out = "".join(cited.feed(text[i : i + size]) for i in range(0, len(text), size))
        assert out + cited.finish() == clean and cited.refs == refs


async def test_the_service_answer_and_done_event_carry_the_citations(url: str) -> None:
    orch = Orchestrator([POLICY], model=team(cites_transfers), store=url)
    await orch.knowledge.add("help/fees.md", FEES)
    async for api in open_api(orch):
        path = f"/v1/conversations/{api.cid()}/messages"
        r = await api.client.post(path, json={"text": Q}, headers=auth("u1"))
        assert r.status_code == 200, r.text
        (cited,) = r.json()["citations"]
        assert cited["title"] == "International transfers" and cited["source"] == "help/fees.md"
        assert set(cited) == {"id", "source", "title", "version"}
        streamed = await api.client.post(
            path,
            json={"text": Q},
            headers={**auth("u1"), "Accept": "text/event-stream"},
        )
        frames = [f for f in streamed.text.strip().split("\n\n") if f.startswith("event: done")]
        assert '"citations":[{"id":"' in frames[0] and "International transfers" in frames[0]
        assert "[1]" not in streamed.text and "[2]" not in streamed.text


async def test_yaml_citations_check_what_the_reply_cites(tmp_path: Path) -> None:
    (tmp_path / "fees.md").write_text(FEES, encoding="utf-8")
    (tmp_path / "cards.md").write_text(
        "# Cards\n\n## Replacement card\nA replacement card costs 5 pounds.\n", encoding="utf-8"
    )

    def run(citations: str, model: str | None) -> Any:
        path = tmp_path / "t.yaml"
        path.write_text(
            "knowledge: [fees.md, cards.md]\n"
            "conversations:\n"
            "  - name: a fee question\n"
            "    user_id: alice\n"
            "    turns:\n"
            "      - user: How much is a replacement card?\n"
            + ("" if model else "        category: CARD_FREEZE\n")
            + ("" if model else "        request: {last_four: '4242'}\n")
            + f"        citations: {citations}\n",
            encoding="utf-8",
        )
        return run_files([load_file(path)], _bank.build, workdir=tmp_path, model=model)

    # Scripted: the response cites the passages sent of the documents the turn names.
    assert (await run("[cards.md]", None)).passed
    report = await run("[]", "offline")  # The offline stand-in cites the passage it quotes.
    assert not report.passed and "citations: expected []" in report.text()
    assert (await run("[cards.md]", "offline")).passed
