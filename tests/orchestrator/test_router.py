"""The router in front of triage (issue 47): `Orchestrator(router=EmbeddingRouter(...))`.

A message near one category's examples is routed with no triage call (`Reply.routed_by ==
"router"`); one between two categories goes to triage, shown the router's candidates only;
the categories' vectors are kept in the store; the decision is audited and replayed; and
without a router a large set of categories still fits the triage allowance.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from frontdesk import Category, EmbeddingRouter, Orchestrator, Outcome
from frontdesk.audit.replay import ReplayReport, recorded_turns, replay_transcript
from frontdesk.audit.transcript import build_transcript
from frontdesk.devkit.replay import build_runner
from frontdesk.errors import ConfigError, ModelConnectionError
from frontdesk.eval import TriageRow, evaluate_triage
from frontdesk.experts.category import HandlerContext
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.threads.budget import DEFAULT_BUDGETS
from frontdesk.threads.tokens import CalibratedCounter
from tests.experts.providers.wire_server import EMBEDDINGS_PATH, WireServer
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio

AXES = ("card", "fee", "transfer", "hello")


class AxisEmbedder:
    """A fake embedder: one axis per keyword, so a text's vector says which it mentions.

    "my card is lost" lies on the card axis (next to the CARDS examples); "a card fee"
    lies between CARDS and FEES. Every call is recorded.
    """

    name = "axes"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.fail = False

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        if self.fail:
            raise ModelConnectionError("axes: down", model=self.name)
        return [axes(t) for t in texts]

    @property
    def texts(self) -> list[str]:
        return [t for call in self.calls for t in call]


def axes(text: str) -> list[float]:
    lowered = text.lower()
    vector = [1.0 if word in lowered else 0.0 for word in AXES] + [0.05]
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector]


class CardRequest(BaseModel):
    last4: str


async def freeze(request: CardRequest, context: HandlerContext) -> Outcome:
    return Outcome(instruction=f"Tell the customer card {request.last4} is frozen.")


async def explain(request: BaseModel, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Explain the fee.")


class FeeRequest(BaseModel):
    pass


def category(name: str, description: str, *examples: str, card: bool = False) -> Category:
    """A category of the test's bank: the card one freezes a card, the others explain."""
    request, handler = (CardRequest, freeze) if card else (FeeRequest, explain)
    return Category(
        name=name,
        description=description,
        examples=list(examples),
        request=request,
        handler=handler,
    )


CARDS = category(
    "CARDS", "A lost or stolen card", "I lost my card", "my card was stolen", card=True
)
FEES = category(
    "FEES", "Charges on the statement", "why was I charged this fee", "a fee on my statement"
)
TRANSFERS = category("TRANSFERS", "Sending money", "send a transfer", "my transfer has not arrived")


def team() -> FakeTeam:
    def extract(request: ModelRequest) -> dict[str, Any]:
        # The customer's words, after any labelled block (a request in progress).
        said = str(request.messages[-1]["content"]).rsplit("\n", 1)[-1]
        if "CardRequest" in str(request.output_type):
            digits = "".join(ch for ch in said if ch.isdigit())
            if len(digits) == 4:
                return {"request": {"last4": digits}}
            return {"need_more_info": {"missing": ["last4"], "question": "Which card?"}}
        return {"request": {}}

    return FakeTeam(route=lambda r: "FEES", extract=extract)


def app(
    url: str | None,
    fake: FakeTeam,
    embedder: Any,
    categories: Sequence[Category] = (CARDS, FEES, TRANSFERS),
    **router: Any,
) -> Orchestrator:
    """The three categories behind a router over `embedder` (a spec or an object), at
    threshold 0.8 and margin 0.1 unless `router` says otherwise; `url=None`: no store."""
    router = {"threshold": 0.8, "margin": 0.1, **router}
    store: dict[str, Any] = {"store": url} if url else {"audit": False, "knowledge": False}
    return Orchestrator(
        list(categories),
        model=fake.model(),
        memory=False,
        router=EmbeddingRouter(embedder, **router),
        **store,
    )


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, db_url: str) -> str:
    """Both stores (the kept vectors are SQL of `threads/routing.py`)."""
    return db_url if request.param == "sqlite" else str(request.getfixturevalue("fresh_pg_url"))


async def routed_events(orch: Orchestrator, conversation_id: str) -> list[dict[str, Any]]:
    assert orch.audit_log is not None
    return [e.payload for e in await orch.audit_log.events(conversation_id) if e.kind == "routed"]


async def test_a_message_next_to_one_category_is_routed_without_a_triage_call(
    url: str,
) -> None:
    db_url = url
    fake, embedder = team(), AxisEmbedder()
    async with app(db_url, fake, embedder) as orch:
        reply = await orch.handle("c", "my card is lost, 1234")
        assert reply.routed_by == "router" and reply.category == "CARDS"
        assert fake.of("triage") == []
        assert reply.request is not None and reply.request.model_dump() == {"last4": "1234"}
        assert reply.models["router"] == "axes"
        (event,) = await routed_events(orch, "c")
        assert event["by"] == "router" and event["category"] == "CARDS"
        assert event["embedder"] == "axes" and event["threshold"] == 0.8
        assert event["margin"] == 0.1
        assert list(event["scores"])[0] == "CARDS" and event["scores"]["CARDS"] > 0.9
        again = await orch.handle("c2", "my card is lost, 1234", client_message_id="m")
        repeat = await orch.handle("c2", "my card is lost, 1234", client_message_id="m")
        assert repeat.replayed and repeat.routed_by == "router" == again.routed_by


async def test_a_message_between_two_categories_goes_to_triage_with_the_candidates_only(
    db_url: str,
) -> None:
    fake, embedder = team(), AxisEmbedder()
    async with app(db_url, fake, embedder, candidates=2) as orch:
        reply = await orch.handle("c", "a card fee")
        assert reply.routed_by == "triage" and reply.category == "FEES"
        (asked,) = fake.of("triage")
        assert asked.output_type is not None
        shown = set(asked.output_type.category_names)  # type: ignore[attr-defined]
        assert shown == {"CARDS", "FEES", "OTHER", "HUMAN"}
        assert "TRANSFERS" not in asked.system and "Sending money" not in asked.system
        assert "I lost my card" in asked.system and "a fee on my statement" in asked.system
        (event,) = await routed_events(orch, "c")
        assert event["by"] == "triage" and event["category"] is None
        assert set(event["scores"]) == {"CARDS", "FEES"}


async def test_the_router_is_off_by_default(db_url: str) -> None:
    fake = team()
    async with Orchestrator([CARDS, FEES], model=fake.model(), store=db_url) as orch:
        reply = await orch.handle("c", "my card is lost")
        assert reply.routed_by == "triage" and len(fake.of("triage")) == 1
        assert "router" not in reply.models and await routed_events(orch, "c") == []


async def test_the_answer_to_the_bots_question_keeps_its_category_without_any_call(
    db_url: str,
) -> None:
    fake, embedder = team(), AxisEmbedder()
    async with app(db_url, fake, embedder) as orch:
        first = await orch.handle("c", "my card was stolen")
        assert first.need_more_info is not None and first.routed_by == "router"
        embedded = len(embedder.texts)
        second = await orch.handle("c", "it ends 4321")
        assert second.category == "CARDS" and second.routed_by == "router"  # No triage call.
        assert second.request is not None and second.request.model_dump() == {"last4": "4321"}
        # The request in progress keeps it (orchestrator/pending.py): the request expert
        # reads the answer, with no embedding and no triage call.
        assert fake.of("triage") == [] and len(embedder.texts) == embedded
        assert second.pending is None and len(await routed_events(orch, "c")) == 1
        # Answered: the next message is routed afresh.
        third = await orch.handle("c", "hello there")
        assert len(embedder.texts) == embedded + 1 and third.category != "CARDS"


async def test_the_category_vectors_are_kept_in_the_store_and_recomputed_when_they_change(
    url: str,
) -> None:
    db_url = url
    fake, embedder = team(), AxisEmbedder()
    async with app(db_url, fake, embedder) as orch:
        await orch.handle("c", "my card is lost")
    texts = embedder.texts
    assert "I lost my card" in texts and "Sending money" in texts and "my card is lost" in texts
    fresh = AxisEmbedder()
    async with app(db_url, fake, fresh) as orch:  # Another process: the vectors are kept.
        await orch.handle("c2", "my card is lost")
    assert fresh.texts == ["my card is lost"]
    changed = category(
        "CARDS", CARDS.description, *CARDS.examples, "card swallowed by the machine", card=True
    )
    third = AxisEmbedder()
    async with app(db_url, fake, third, [changed, FEES, TRANSFERS]) as orch:
        await orch.handle("c3", "my card is lost")
    assert third.texts == ["card swallowed by the machine", "my card is lost"]


async def test_an_embeddings_outage_costs_a_triage_call_not_the_turn(db_url: str) -> None:
    fake, embedder = team(), AxisEmbedder()
    embedder.fail = True
    async with app(db_url, fake, embedder) as orch:
        reply = await orch.handle("c", "my card is lost")
        assert reply.routed_by == "triage" and reply.category == "FEES"
        (asked,) = fake.of("triage")
        assert "Sending money" in asked.system  # Every category: no candidates were found.
        (event,) = await routed_events(orch, "c")
        assert event == {"by": "triage", "category": None, "error": "ModelConnectionError"}


async def test_replay_reproduces_the_routers_decision(db_url: str) -> None:
    fake, embedder = team(), AxisEmbedder()
    async with app(db_url, fake, embedder) as orch:
        await orch.handle("c", "my card is lost, 1234")
        await orch.handle("c", "a transfer fee")
        assert orch.audit_log is not None
        transcript = build_transcript("c", await orch.audit_log.events("c"))
        turns = recorded_turns(transcript)
        assert turns[0].view.routed is not None and turns[0].view.routed["by"] == "router"
        replay_team = team()
        runner = build_runner(orch, models={"default": FunctionModel(replay_team)})
        report = ReplayReport(await replay_transcript(transcript, runner))
    assert report.exit_code == 0 and len(report.diffs) == 2
    assert [d.after.category for d in report.diffs if d.after] == ["CARDS", "FEES"]
    assert not any(d.category_changed or d.error for d in report.diffs)
    # The first turn was routed again by the router; only the second asked triage, which
    # was shown the router's candidates, as in the recorded turn.
    (asked,) = replay_team.of("triage")
    assert "TRANSFERS" in asked.system and "FEES" in asked.system


async def test_an_openai_compatible_embeddings_endpoint_routes(
    db_url: str, wire: WireServer
) -> None:
    wire.embed = axes
    fake, spec = team(), f"openai:embed-test@{wire.url}/v1"
    assert EmbeddingRouter(spec).embedder.name == spec
    async with app(db_url, fake, spec) as orch:
        reply = await orch.handle("c", "my card is lost")
    assert reply.routed_by == "router" and reply.category == "CARDS"
    sent = [r.body["input"] for r in wire.requests_to(EMBEDDINGS_PATH)]
    assert sent[-1] == ["my card is lost"] and "I lost my card" in sent[0]
    assert all(r.body["model"] == "embed-test" for r in wire.requests_to(EMBEDDINGS_PATH))


async def test_the_minilm_embedder_routes_a_plain_message(db_url: str) -> None:
    fake = team()
    async with app(db_url, fake, "minilm", threshold=0.5, margin=0.05) as orch:
        reply = await orch.handle("c", "Someone stole my card yesterday")
        between = await orch.handle("c2", "hmm")
    assert reply.routed_by == "router" and reply.category == "CARDS"
    assert between.routed_by == "triage"


def test_bad_router_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown embedder"):
        EmbeddingRouter("word2vec")
    with pytest.raises(ConfigError, match="threshold"):
        EmbeddingRouter(AxisEmbedder(), threshold=3)
    with pytest.raises(ConfigError, match="candidates"):
        EmbeddingRouter(AxisEmbedder(), candidates=1)
    with pytest.raises(ConfigError, match="EmbeddingRouter"):
        Orchestrator([CARDS], model="offline", router="minilm")


WORDS = (
    "account balance card payment transfer fee charge refund limit statement pin cash atm"
    " withdrawal deposit salary currency exchange rate travel abroad contactless phone app"
    " verify identity passport address change close open savings interest overdraft loan"
    " mortgage direct debit standing order cheque branch online login password blocked"
    " frozen stolen lost delivery arrival pending declined merchant dispute fraud virtual"
    " top up apple google wallet business joint child student pension insurance tax"
).split()


def many_categories(count: int = 77, examples: int = 10) -> list[Category]:
    """`count` categories of `examples` examples each, with BANKING77's sizes (a two-word
    topic each; examples of 10 to 14 words)."""
    rng = random.Random(47)
    categories = []
    for i in range(count):
        topic = f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7 + 3) % len(WORDS)]}"
        texts = [
            f"I have a question about my {topic} "
            + " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 10)))
            for _ in range(examples)
        ]
        categories.append(
            Category(
                name=f"INTENT_{i:02d}",
                description=f"The customer asks about {topic}.",
                request=None,
                handler=None,
                examples=texts,
            )
        )
    return categories


async def test_77_categories_with_10_examples_fit_the_default_triage_allowance(
    tmp_path: Path,
) -> None:
    categories = many_categories()
    whole = sum(len(e) for c in categories for e in c.examples) // 4
    assert whole > DEFAULT_BUDGETS["triage"].system  # All of them could never fit.
    fake = FakeTeam(route=lambda r: r.output_type.category_names[0])  # type: ignore[union-attr]
    messages = [
        (c.name, c.examples[3].replace("I have a question about", "help with"))
        for c in categories[:12]
    ]
    async with Orchestrator(  # The default budgets.
        categories, model=fake.model(), store=f"sqlite:///{tmp_path / 'b.db'}", memory=False
    ) as orch:
        for i, (_, text) in enumerate(messages):
            await orch.handle(f"c{i}", text)
    counter = CalibratedCounter()
    allowance = DEFAULT_BUDGETS["triage"].system
    asked = fake.of("triage")
    assert len(asked) == len(messages)
    for request, (name, _text) in zip(asked, messages, strict=True):
        assert counter.count(request.system) <= allowance
        # Every category is described; the examples are a few, nearest the message.
        assert all(f"- {c.name}: {c.description}" in request.system for c in categories)
        shown = [e for c in categories for e in c.examples if f'"{e}"' in request.system]
        assert 0 < len(shown) < 770
        own = next(c for c in categories if c.name == name)
        assert f'"{own.examples[3]}"' in request.system  # The nearest of all is shown.


async def test_eval_triage_with_a_router_reports_the_routed_share_and_the_curve() -> None:
    fake, embedder = team(), AxisEmbedder()
    orch = app(None, fake, embedder)
    rows = [
        TriageRow("my card is lost", "CARDS"),  # Routed, right.
        TriageRow("a transfer please", "TRANSFERS"),  # Routed, right.
        TriageRow("a transfer fee", "FEES"),  # Between two: triage (answers FEES).
        TriageRow("card card", "FEES"),  # Routed, wrong.
    ]
    report = await evaluate_triage(orch, rows, concurrency=1)
    assert [o.predicted for o in report.outcomes] == ["CARDS", "TRANSFERS", "FEES", "CARDS"]
    assert len(fake.of("triage")) == 1 and report.costs.model_calls == 1
    assert report.accuracy == 0.75
    figures = report.router
    assert figures is not None and figures.embedder == "axes"
    assert figures.routed_share == 0.75 and figures.routed_precision == pytest.approx(2 / 3)
    low = next(p for p in figures.curve if p.threshold == 0.5)
    assert low.coverage == 0.75  # The row between two categories is under the margin.
    assert "routed without a triage call 0.750" in report.text()
    assert report.to_json()["router"]["routed_share"] == 0.75
    without = await evaluate_triage(
        Orchestrator([CARDS, FEES, TRANSFERS], model=fake.model(), audit=False), rows
    )
    assert without.router is None and without.costs.model_calls == 4
