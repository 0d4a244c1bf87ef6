"""Whole turns on a self-hosted OpenAI-compatible server (the wire server acting like
`llama-server` or `llama-cpp-python`), through the real SDK: no instruction ever reaches
the customer, an unreadable answer is asked about again, a failed reply after the handler
acted falls back to a plain one, budgets fit the model's window, and a server that answers
one request at a time gets no speculative call."""

from __future__ import annotations

from typing import Any

import pytest

from frontdesk.errors import ConfigError, OutputValidationError, TruncatedOutput
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.experts.providers import FunctionModel, ModelRequest, ModelSettings
from frontdesk.labels import INSTRUCTION_LABEL
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.config import ExpertSettings
from frontdesk.orchestrator.fallbacks import UNREADABLE, plain_reply
from frontdesk.threads.budget import DEFAULT_BUDGETS, TEMPLATE_MARGIN, Budget, fit_to_window
from tests.experts.providers.wire_server import LlamaCppPython, LlamaServer, WireServer
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.anyio

ORDER = {"kind": "request", "request": {"variety": "purple", "bags": 2}}


def _spec(wire: WireServer, query: str = "") -> str:
    return f"openai:smollm2@{wire.url}/v1{query}"


async def _kinds(orch: Orchestrator, conversation: str) -> list[str]:
    log = orch.audit_log
    assert log is not None
    return [e.kind for e in await log.events(conversation)]


async def test_on_a_prefilling_server_no_reply_shows_the_handlers_instruction(
    wire: WireServer, db_url: str
) -> None:
    wire.mode = LlamaServer(
        text="Shall I place that order?",
        wants={"TriageDecision": {"category": "ORDERS"}, "OrderRequestExtraction": ORDER},
    )
    orch = Orchestrator(potato_categories(), model=_spec(wire), store=db_url)
    reply = await orch.handle("c", "two bags of purple please")
    await orch.aclose()
    assert reply.outcome is not None and reply.category == "ORDERS"
    instruction = reply.outcome.instruction
    assert instruction.startswith("Ask the user to confirm")
    assert reply.text == "Shall I place that order?"
    assert instruction not in reply.text and "Ask the user" not in reply.text


async def test_llama_cpp_python_with_output_json_object_answers_the_turn(
    wire: WireServer, db_url: str
) -> None:
    wire.mode = LlamaCppPython(
        text="Please confirm.",
        wants={"TriageDecision": {"category": "ORDERS"}, "OrderRequestExtraction": ORDER},
    )
    orch = Orchestrator(potato_categories(), model=_spec(wire, "?output=json_object"), store=db_url)
    reply = await orch.handle("c", "two bags of purple please")
    await orch.aclose()
    assert reply.category == "ORDERS" and reply.text == "Please confirm."
    assert reply.request is not None and reply.request.model_dump()["bags"] == 2


async def test_a_triage_that_always_answers_garbage_is_asked_about_three_times_then_a_person(
    wire: WireServer, db_url: str
) -> None:
    wire.mode = LlamaServer(text="Sorry, could you say that another way?")
    wire.mode.wants["TriageDecision"] = "I think maybe potatoes?"  # never JSON
    orch = Orchestrator(potato_categories(), model=_spec(wire, "?output=prompt"), store=db_url)
    replies = [await orch.handle("c", f"hmm {i}") for i in range(4)]
    kinds = await _kinds(orch, "c")
    await orch.aclose()
    assert [r.handoff for r in replies] == [False, False, False, True]
    for reply in replies[:3]:
        assert reply.category == "OTHER" and reply.outcome is not None
        assert reply.outcome.instruction.startswith(UNREADABLE)
        # The outcome's own words (`Outcome.reply`), sent verbatim: no response expert
        # call while the model misbehaves.
        assert reply.text.startswith("Sorry, I did not quite follow.")
    assert replies[3].category == "OTHER" and replies[3].outcome is not None
    assert replies[3].outcome.handoff is not None and "4 unreadable" in replies[3].outcome.handoff
    assert kinds.count("unreadable") == 4 and kinds.count("turn_failed") == 0


async def test_on_unreadable_handoff_hands_off_at_once(wire: WireServer, db_url: str) -> None:
    wire.mode = LlamaServer(wants={"TriageDecision": "no JSON here"})
    orch = Orchestrator(
        potato_categories(),
        model=_spec(wire, "?output=prompt"),
        store=db_url,
        on_unreadable="handoff",
    )
    reply = await orch.handle("c", "hmm")
    await orch.aclose()
    assert reply.handoff and reply.category == "HUMAN"


async def test_an_unreadable_extraction_asks_for_the_request_fields(
    team: FakeTeam, db_url: str
) -> None:
    team.route = lambda r: "ORDERS"
    team.extract = lambda r: {"kind": "request", "request": {"variety": "blue"}}  # invalid

    orch = Orchestrator(potato_categories(), model=team.model(), store=db_url)
    first = await orch.handle("c", "potatoes!")
    team.extract = lambda r: ORDER
    readable = await orch.handle("c", "two bags of purple")
    team.extract = lambda r: {}
    after = await orch.handle("c", "and more?")
    await orch.aclose()
    assert not first.handoff and first.outcome is not None
    assert first.outcome.data["need_more_info"]["missing"] == ["variety", "bags"]
    assert "variety, bags" in first.outcome.instruction
    assert readable.outcome is not None and not readable.outcome.instruction.startswith(UNREADABLE)
    # The count starts again after a readable turn: a question, not a hand-off.
    assert after.outcome is not None and after.outcome.instruction.startswith(UNREADABLE)
    assert not after.handoff


@pytest.mark.parametrize("failure", [TruncatedOutput, OutputValidationError])
async def test_a_reply_that_fails_after_the_handler_acted_falls_back_to_a_plain_one(
    team: FakeTeam, db_url: str, failure: type[Exception]
) -> None:
    team.route = lambda r: "ORDERS"
    team.extract = lambda r: ORDER

    def cut_off(request: ModelRequest) -> Any:
        if request.expert == "response":
            team.calls.append(request)
            raise failure("the answer was cut off at max_tokens=512")
        return team(request)

    orch = Orchestrator(potato_categories(), model=FunctionModel(cut_off), store=db_url)
    reply = await orch.handle("c", "two bags of purple")
    transcript = await orch.transcript("c")
    kinds = await _kinds(orch, "c")
    await orch.aclose()
    assert reply.outcome is not None
    assert reply.text == plain_reply(reply.outcome)
    assert reply.text.startswith("Could you confirm buying 2 bags of purple potatoes")
    assert [(m.role, m.failed) for m in transcript] == [("user", False), ("assistant", False)]
    assert "response_fallback" in kinds and "turn_failed" not in kinds


async def test_the_fallback_uses_the_handlers_own_words_when_it_gave_them(
    team: FakeTeam, db_url: str
) -> None:
    from pydantic import BaseModel

    class Freeze(BaseModel):
        last_four: str

    async def freeze(request: Freeze, context: HandlerContext) -> Outcome:
        return Outcome(
            instruction=f"Tell the user card {request.last_four} is frozen. Be calm.",
            reply=f"Your card ending {request.last_four} is frozen.",
        )

    cards = Category(
        name="CARDS", description="Freeze a card", request=Freeze, handler=freeze, examples=[]
    )
    team.route = lambda r: "CARDS"
    team.extract = lambda r: {"kind": "request", "request": {"last_four": "1234"}}

    def down(request: ModelRequest) -> Any:
        if request.expert == "response":
            raise TruncatedOutput("cut off")
        return team(request)

    orch = Orchestrator([cards], model=FunctionModel(down), store=db_url)
    reply = await orch.handle("c", "freeze 1234")
    await orch.aclose()
    assert reply.text == "Your card ending 1234 is frozen."


def test_plain_reply_says_the_instruction_to_the_customer() -> None:
    said = plain_reply(
        Outcome(
            instruction="Tell the user the £3.99 delivery fee was refunded to their card."
            " Apologise for the delay. Be warm and brief."
        )
    )
    assert said == "The £3.99 delivery fee was refunded to your card. Sorry for the trouble."


async def test_concurrency_1_runs_no_speculative_request_call(
    wire: WireServer, db_url: str
) -> None:
    for query, speculated in (("", True), ("?concurrency=1", False)):
        wire.mode = LlamaServer(
            wants={"TriageDecision": {"category": "ORDERS"}, "OrderRequestExtraction": ORDER}
        )
        orch = Orchestrator(potato_categories(), model=_spec(wire, query), store=db_url)
        conversation = f"c{query}"
        await orch.handle(conversation, "two bags of purple")
        await orch.handle(conversation, "make it three")
        kinds = await _kinds(orch, conversation)
        await orch.aclose()
        assert ("speculation" in kinds) is speculated


def test_context_tokens_cut_every_budget_to_the_window(wire: WireServer, db_url: str) -> None:
    orch = Orchestrator(
        potato_categories(), model=_spec(wire, "?context_tokens=4096"), store=db_url
    )
    for expert in ("triage", "request", "response", "summariser", "memory"):
        assert orch.budgets[expert].total <= 4096 - int(4096 * TEMPLATE_MARGIN)
    assert orch.budgets["request"].question < DEFAULT_BUDGETS["request"].question


def test_context_tokens_per_expert_and_a_window_too_small_for_the_prompt(
    wire: WireServer, db_url: str
) -> None:
    settings = ExpertSettings(request=ModelSettings(max_tokens=1024, context_tokens=1200))
    with pytest.raises(ConfigError, match=r"request expert does not fit.*context_tokens=1,200"):
        Orchestrator(potato_categories(), model=_spec(wire), store=db_url, settings=settings)


def test_fit_to_window_arithmetic() -> None:
    budget = Budget(system=2_000, history=6_000, question=4_000, answer=1_000, documents=2_000)
    fitted = fit_to_window(budget, context_tokens=8_000, system_tokens=1_000, expert="response")
    room = 8_000 - 400 - 1_000 - 1_000  # window - 5% template - system - answer
    assert (fitted.system, fitted.answer) == (1_000, 1_000)
    assert fitted.history == room * 6 // 12 and fitted.question == room * 4 // 12
    assert fitted.documents == room * 2 // 12 and fitted.total <= 8_000
    assert fit_to_window(budget, context_tokens=20_000, system_tokens=1_000, expert="x") is budget


async def test_a_reply_that_copies_the_instruction_is_replaced_by_a_plain_one(
    team: FakeTeam, db_url: str
) -> None:
    """A small model echoes what it was given (the labelled block): never shown."""
    team.route = lambda r: "ORDERS"
    team.extract = lambda r: ORDER

    def echo(request: ModelRequest) -> Any:
        if request.expert == "response":
            team.calls.append(request)
            return f"Sure!\n{INSTRUCTION_LABEL}\n{request.messages[-1]['content']}"
        return team(request)

    orch = Orchestrator(potato_categories(), model=FunctionModel(echo), store=db_url)
    reply = await orch.handle("c", "two bags of purple")
    kinds = await _kinds(orch, "c")
    await orch.aclose()
    assert reply.outcome is not None
    assert INSTRUCTION_LABEL not in reply.text and "Ask the user" not in reply.text
    assert reply.text == plain_reply(reply.outcome)
    assert "response_fallback" in kinds
