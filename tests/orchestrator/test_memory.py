"""Long-term memory through the public API, with the library's doubles, on both backends.

The memory expert is a `FunctionModel` answering from a table of phrases, so each test
says which facts a message states; everything else (storage, supersession, ranking,
budgets, placement, audit, background running) is the real thing.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from frontdesk import Category, HandlerContext, Memory, Orchestrator, Outcome
from frontdesk.errors import MemoryNotFound, ModelAPIError
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator.config import resolve_models
from frontdesk.threads.budget import DEFAULT_BUDGETS, Budget

pytestmark = pytest.mark.anyio

PHRASES: dict[str, list[dict[str, Any]]] = {
    "i prefer hindi": [{"text": "Prefers replies in Hindi", "key": "language"}],
    "allergic to peanuts": [{"text": "Allergic to peanuts", "key": None}],
    "i live in pune": [{"text": "Lives in Pune", "key": "home_city"}],
    "moved to mumbai": [{"text": "Lives in Mumbai", "key": "home_city"}],
}


class RecipeRequest(BaseModel):
    dish: str = "anything"


async def suggest(request: RecipeRequest, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Suggest a potato recipe for the user.")


async def note_delivery(request: RecipeRequest, context: HandlerContext) -> Outcome:
    await context.memory.remember("Wants deliveries after 6pm", key="delivery_time")
    return Outcome(instruction="Say that deliveries will come after 6pm from now on.")


RECIPES = Category(
    name="RECIPES", description="Recipe ideas", request=RecipeRequest, handler=suggest
)
DELIVERY = Category(
    name="DELIVERY", description="Delivery times", request=RecipeRequest, handler=note_delivery
)


@dataclass
class Team:
    """Every expert as one FunctionModel; the memory expert answers from `PHRASES`."""

    route: Callable[[ModelRequest], str] = lambda r: "RECIPES"
    memory: Callable[[ModelRequest], Any] | None = None
    calls: list[ModelRequest] = field(default_factory=list)

    def __call__(self, request: ModelRequest) -> Any:
        self.calls.append(request)
        if request.expert == "triage":
            return {"category": self.route(request), "reason": "test"}
        if request.expert == "request":
            return {"request": {"dish": "anything"}}
        if request.expert == "memory":
            if self.memory is not None:
                return self.memory(request)
            text = request.messages[-1]["content"].lower()
            return {"facts": [f for phrase, fs in PHRASES.items() if phrase in text for f in fs]}
        return f"reply {len(self.of('response'))}"

    def of(self, expert: str) -> list[ModelRequest]:
        return [c for c in self.calls if c.expert == expert]


def orchestrator(team: Team, url: str, **kwargs: Any) -> Orchestrator:
    return Orchestrator([RECIPES, DELIVERY], model=FunctionModel(team), store=url, **kwargs)


def texts_sent(request: ModelRequest) -> list[str]:
    """What each message of the request says besides the memory blocks (which open the
    last user turn)."""
    blocks = request.memory + "\n\n" if request.memory else ""
    return [m["content"].removeprefix(blocks) for m in request.messages]


def fact_lines(memory: str) -> list[str]:
    """The facts of the memory blocks, in order (the labels and delimiters left out)."""
    return [line for line in memory.splitlines() if line.startswith("- ")]


def in_the_last_user_turn_only(request: ModelRequest) -> bool:
    """The memory blocks open the last user turn, and nothing else holds them."""
    users = [i for i, m in enumerate(request.messages) if m["role"] == "user"]
    last = request.messages[users[-1]]["content"]
    return last.startswith(request.memory) and request.memory not in request.system


async def learnt(orch: Orchestrator) -> None:
    """Wait for the memory expert's background work started so far."""
    await orch.memory.wait()


async def test_prefers_hindi_said_in_one_conversation_is_used_in_the_next(any_url: str) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url)
    await orch.handle("c1", "Hi! I prefer Hindi, if that's possible.", user_id="priya")
    await learnt(orch)
    await orch.handle("c2", "What do you sell?", user_id="priya")
    await orch.aclose()

    first, second = team.of("response")
    assert first.memory == ""  # Nothing was known yet.
    assert "Prefers replies in Hindi" in second.memory
    for request in team.of("triage")[1:] + team.of("response")[1:]:
        assert "Prefers replies in Hindi" in request.memory
        assert in_the_last_user_turn_only(request)
        assert all("Prefers replies" not in text for text in texts_sent(request))
    # Never in the response expert's instruction.
    assert "Hindi" not in second.messages[-1]["content"]


async def test_a_peanut_allergy_reaches_the_response_expert_in_a_later_recipe_conversation(
    any_url: str,
) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url)
    await orch.handle("c1", "By the way, I'm allergic to peanuts.", user_id="sam")
    await learnt(orch)
    team.route = lambda r: "RECIPES"
    await orch.handle("c2", "Can you suggest a potato recipe for dinner?", user_id="sam")
    memories = await orch.memories("sam")
    await orch.aclose()

    response = team.of("response")[-1]
    assert fact_lines(response.memory) == ["- Allergic to peanuts"]
    assert response.memory_ids == tuple(m.id for m in memories)
    assert response.messages[-1]["content"] == "Suggest a potato recipe for the user."
    assert [m.source for m in memories] == ["memory_expert"]
    assert memories[0].conversation_id == "c1"


async def test_a_move_from_pune_to_mumbai_leaves_only_mumbai_current_and_sent(
    any_url: str,
) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url)
    await orch.handle("c1", "I live in Pune", user_id="asha")
    await orch.handle("c2", "I've moved to Mumbai last month", user_id="asha")
    await learnt(orch)
    await orch.handle("c3", "Do you deliver to my city?", user_id="asha")
    current = await orch.memories("asha")
    await orch.aclose()

    assert [m.text for m in current] == ["Lives in Mumbai"]
    assert current[0].key == "home_city"
    last = team.of("response")[-1]
    assert "Lives in Mumbai" in last.memory and "Pune" not in last.memory
    # The memory expert was told the key already in use, so it could reuse it.
    assert "(key: home_city)" in team.of("memory")[1].memory


async def test_one_users_facts_never_reach_another_users_requests(any_url: str) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url)
    await orch.remember("ann", "Allergic to peanuts")
    await orch.handle("a1", "I prefer Hindi", user_id="ann")
    await learnt(orch)
    calls_before = len(team.calls)
    await orch.handle("b1", "Any peanut recipes? I prefer Hindi too", user_id="ben")
    await orch.handle("n1", "peanut recipes?")  # single-user mode: no memory at all
    assert await orch.memories("ben") == [] or all(
        m.user_id == "ben" for m in await orch.memories("ben")
    )
    ann = await orch.memories("ann")
    await orch.aclose()

    assert {m.text for m in ann} == {"Allergic to peanuts", "Prefers replies in Hindi"}
    for request in team.calls[calls_before:]:
        assert "Allergic to peanuts" not in request.memory
        assert not set(request.memory_ids) & {m.id for m in ann}


async def test_under_a_small_memory_budget_an_unrelated_fact_goes_before_a_relevant_one(
    any_url: str,
) -> None:
    team = Team()
    fits_one = (
        Orchestrator([RECIPES], model="offline")
        .counter_for("response")
        .count("- Allergic to peanuts")
    )
    small = Budget(system=2_000, history=6_000, question=4_500, answer=1_024, memory=fits_one)
    orch = orchestrator(team, any_url, budgets={**DEFAULT_BUDGETS, "response": small})
    await orch.remember("kim", "Allergic to peanuts")
    await orch.remember("kim", "Lives in Pune")  # newer, but unrelated to the question
    await orch.handle("k1", "A recipe without peanuts please", user_id="kim")
    await orch.aclose()

    response = team.of("response")[0]
    assert fact_lines(response.memory) == ["- Allergic to peanuts"]
    triage = team.of("triage")[0]  # A larger allowance: both, the relevant one first.
    assert fact_lines(triage.memory) == ["- Allergic to peanuts", "- Lives in Pune"]


async def test_a_handful_of_facts_is_all_sent_even_when_no_word_matches(any_url: str) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url)
    for text in ("Allergic to peanuts", "Lives in Pune", "Prefers replies in Hindi"):
        await orch.remember("lee", text)
    await orch.handle("l1", "hello there", user_id="lee")
    await orch.aclose()

    lines = fact_lines(team.of("response")[0].memory)
    assert lines == ["- Prefers replies in Hindi", "- Lives in Pune", "- Allergic to peanuts"]


async def test_forget_removes_the_fact_from_the_next_request_and_audits_no_text(
    any_url: str,
) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url)
    kept = await orch.remember("mo", "Allergic to peanuts")
    gone = await orch.remember("mo", "Keeps a parrot called Zanzibar")
    await orch.handle("m1", "hello", user_id="mo")
    await orch.forget("mo", gone.id)
    await orch.handle("m1", "hello again", user_id="mo")
    with pytest.raises(MemoryNotFound):
        await orch.forget("mo", gone.id)
    with pytest.raises(MemoryNotFound):  # Another user's id is not found either.
        await orch.forget("someone-else", kept.id)
    events = await orch.audit_log.events(_user_chain("mo"))  # type: ignore[union-attr]
    report = await orch.audit_log.verify()  # type: ignore[union-attr]
    await orch.aclose()

    before, after = team.of("response")
    assert "Zanzibar" in before.memory
    assert "Zanzibar" not in after.memory and "Allergic to peanuts" in after.memory
    forgotten = [e for e in events if e.kind == "memory_forgotten"]
    assert len(forgotten) == 1
    assert "Zanzibar" not in forgotten[0].payload_json
    assert gone.id in forgotten[0].payload_json
    assert report.ok


def _user_chain(user_id: str) -> str:
    from frontdesk.audit.chains import user_chain_id

    return user_chain_id(user_id)


async def test_correct_and_forget_all_apply_from_the_very_next_request(any_url: str) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url)
    fact = await orch.remember("jo", "Lives in Pune", key="home_city")
    await orch.remember("jo", "Allergic to peanuts")
    corrected = await orch.correct("jo", fact.id, "Lives in Pune, Maharashtra")
    await orch.handle("j1", "hello", user_id="jo")
    with pytest.raises(MemoryNotFound):
        await orch.correct("other", fact.id, "stolen")
    assert await orch.forget_all("jo") == 2
    await orch.handle("j1", "hello again", user_id="jo")
    assert await orch.memories("jo") == []
    assert await orch.forget_all("jo") == 0
    await orch.aclose()

    assert corrected.id == fact.id and corrected.key == "home_city"
    assert corrected.updated_at > fact.updated_at
    first, second = team.of("response")
    assert "Lives in Pune, Maharashtra" in first.memory
    assert second.memory == ""


async def test_memories_lists_the_most_recently_updated_first_and_memory_is_frozen(
    any_url: str,
) -> None:
    orch = orchestrator(Team(), any_url)
    a = await orch.remember("pat", "Allergic to peanuts")
    b = await orch.remember("pat", "Lives in Pune", key="home_city")
    await orch.correct("pat", a.id, "Allergic to peanuts and cashews")
    listed = await orch.memories("pat")
    await orch.aclose()

    assert [m.id for m in listed] == [a.id, b.id]
    assert isinstance(listed[0], Memory)
    with pytest.raises(AttributeError):
        listed[0].text = "changed"  # type: ignore[misc]


async def test_a_handler_remembers_for_the_turns_user(any_url: str) -> None:
    team = Team(route=lambda r: "DELIVERY")
    orch = orchestrator(team, any_url)
    await orch.handle("d1", "Please deliver in the evening", user_id="ola")
    await orch.handle("d2", "Any news?", user_id="ola")
    memories = await orch.memories("ola")
    await orch.aclose()

    assert [(m.text, m.key, m.source, m.conversation_id) for m in memories] == [
        ("Wants deliveries after 6pm", "delivery_time", "handler", "d1")
    ]
    assert "Wants deliveries after 6pm" in team.of("response")[1].memory


async def test_a_slow_memory_expert_never_slows_a_turn(any_url: str) -> None:
    async def slow(request: ModelRequest) -> Any:
        await asyncio.sleep(1.5)
        return {"facts": [{"text": "Prefers replies in Hindi", "key": "language"}]}

    team = Team(route=lambda r: "OTHER", memory=None)
    models = {"default": FunctionModel(team), "memory": FunctionModel(slow)}
    orch = Orchestrator([RECIPES], model=models, store=any_url)
    await orch.open()
    took = []
    for text in ("I prefer Hindi", "And I live in Pune"):
        started = time.perf_counter()
        await orch.handle("s1", text, user_id="viv")
        took.append(time.perf_counter() - started)
    started = time.perf_counter()
    await orch.aclose()
    closing = time.perf_counter() - started

    assert max(took) < 0.8, took
    assert closing < 10
    reopened = orchestrator(team, any_url)
    assert [m.text for m in await reopened.memories("viv")] == ["Prefers replies in Hindi"]
    await reopened.aclose()


async def test_a_failing_memory_expert_never_fails_a_turn_and_aclose_finishes(
    any_url: str,
) -> None:
    def failing(request: ModelRequest) -> Any:
        raise ModelAPIError("the memory model is down", model="function")

    team = Team(route=lambda r: "OTHER", memory=failing)
    orch = orchestrator(team, any_url)
    replies = [await orch.handle("f1", t, user_id="fay") for t in ("I prefer Hindi", "hi")]
    started = time.perf_counter()
    await orch.aclose()
    closing = time.perf_counter() - started
    log = orchestrator(team, any_url)
    events = [e.kind for e in await (await log.open()).audit_log.events("f1")]  # type: ignore[union-attr]
    await log.aclose()

    assert closing < 90
    assert [r.text for r in replies] == ["reply 1", "reply 2"]
    assert events.count("memory_failed") >= 1
    check = orchestrator(team, any_url)
    assert await check.memories("fay") == []
    await check.aclose()


@pytest.mark.parametrize(
    "rubbish",
    [
        "not even json",
        {"facts": "nope"},
        {"facts": [{"text": "   ", "key": None}, {"text": "x" * 5_000, "key": None}]},
    ],
)
async def test_a_memory_expert_answering_rubbish_stores_nothing(any_url: str, rubbish: Any) -> None:
    team = Team(route=lambda r: "OTHER", memory=lambda r: rubbish)
    orch = orchestrator(team, any_url)
    reply = await orch.handle("r1", "I prefer Hindi", user_id="rex")
    await learnt(orch)
    assert await orch.memories("rex") == []
    await orch.aclose()
    assert reply.text == "reply 1"


async def test_the_thread_stays_pure_and_the_memory_expert_reads_only_user_turns(
    any_url: str,
) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url)
    said = ["I prefer Hindi", "I'm allergic to peanuts", "Thanks, that is all"]
    for text in said:
        await orch.handle("p1", text, user_id="uma")
        await learnt(orch)
    thread = await orch.user_thread("p1", user_id="uma")
    transcript = await orch.transcript("p1", user_id="uma")
    facts = [m.text for m in await orch.memories("uma")]
    await orch.aclose()

    assert sorted(facts) == ["Allergic to peanuts", "Prefers replies in Hindi"]
    for text in [m.content for m in thread.messages] + [m.content for m in transcript]:
        assert not any(f in text for f in facts)
    for request in team.calls:
        assert not any(f in t for t in texts_sent(request) for f in facts)
    memory_calls = team.of("memory")
    stating = said[:2]  # "Thanks, that is all" may state no fact: no memory call for it.
    assert [texts_sent(r) for r in memory_calls] == [[t] for t in stating]
    replies = {m.content for m in transcript if m.role == "assistant"}
    for request in memory_calls:
        assert not any(reply in request.memory + request.system for reply in replies)


async def test_the_audit_row_of_each_call_records_the_memory_ids_and_where_it_was_sent(
    any_url: str,
) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url)
    fact = await orch.remember("ida", "Allergic to peanuts")
    await orch.handle("i1", "hello", user_id="ida")
    events = await orch.audit_log.events("i1")  # type: ignore[union-attr]
    await orch.aclose()

    attempts = [e.payload for e in events if e.kind == "model_attempt"]  # Blobs expanded.
    sent = {a["expert"]: a.get("memory") for a in attempts}
    response = team.of("response")[0]
    assert sent["response"] == {"ids": [fact.id]}
    assert sent["triage"] == {"ids": [fact.id]}
    # The blocks' text is recorded once, where it was sent: in the last user turn.
    recorded = next(a for a in attempts if a["expert"] == "response")["messages"]
    assert recorded[-2]["content"].startswith(response.memory)


def test_a_model_map_naming_neither_memory_nor_default_gives_it_the_summarisers_model() -> None:
    a, s, m = FunctionModel(lambda r: "a"), FunctionModel(lambda r: "s"), FunctionModel(str)
    four = {"triage": a, "request": a, "response": a, "summariser": s}
    assert resolve_models(four)["memory"] is s
    assert resolve_models({"default": a, "summariser": s})["memory"] is a
    assert resolve_models({**four, "memory": m})["memory"] is m
    assert resolve_models(a)["memory"] is a


async def test_a_handler_turn_without_a_user_cannot_remember(db_url: str) -> None:
    team = Team(route=lambda r: "DELIVERY")
    orch = orchestrator(team, db_url)
    await orch.handle("x1", "Deliver in the evening")  # no user_id: single-user mode
    events = await orch.audit_log.events("x1")  # type: ignore[union-attr]
    await orch.aclose()

    errors = [json.dumps(e.payload) for e in events if e.kind == "handler_error"]
    assert len(errors) == 1 and "memories belong to a user" in errors[0]


async def test_memory_off_reads_and_writes_none_in_turns(any_url: str) -> None:
    team = Team(route=lambda r: "OTHER")
    orch = orchestrator(team, any_url, memory=False)
    await orch.remember("eve", "Allergic to peanuts")
    await orch.handle("e1", "I prefer Hindi", user_id="eve")
    await learnt(orch)
    memories = await orch.memories("eve")
    await orch.aclose()

    assert [m.text for m in memories] == ["Allergic to peanuts"]  # Only what was remembered.
    assert team.of("memory") == []
    assert all(r.memory == "" and r.memory_ids == () for r in team.calls)


async def test_a_handler_recalls_the_facts_and_the_request_may_fill_a_field_from_one(
    db_url: str,
) -> None:
    """`context.memory.recall()` in a real turn; the request expert is told it may use a
    remembered fact, and the audit (and its transcript view) shows which field it did."""
    from frontdesk.audit.transcript import build_transcript
    from tests.orchestrator._bank import CATEGORIES

    sent: list[ModelRequest] = []

    def model(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "BALANCE", "reason": "balance"}
        if request.expert == "request":
            sent.append(request)
            return {"request": {"account": "savings"}, "from_memory": ["account", "nope"]}
        if request.expert == "memory":
            return {"facts": []}
        return "Your savings balance is 1,234.50 pounds."

    orch = Orchestrator(
        CATEGORIES, model=FunctionModel(model), store=db_url, handler_errors="raise"
    )
    await orch.remember("bob", "Keeps his money in the savings account", key="account")
    reply = await orch.handle("c-1", "What's my balance?", user_id="bob")
    assert reply.outcome is not None
    assert reply.outcome.data == {
        "amount": "1234.50",
        "facts": ["Keeps his money in the savings account"],
    }
    (request,) = sent
    assert "Keeps his money in the savings account" in request.memory
    assert "from_memory" in request.system and "remembered" in request.system
    log = orch.audit_log
    assert log is not None
    rows = await log.events("c-1")
    await orch.aclose()
    (noted,) = [r.payload for r in rows if r.kind == "request"]
    assert noted["from_memory"] == ["account"]  # Only fields the request model has.
    (turn,) = build_transcript("c-1", rows).turns
    assert turn.request_from_memory == ["account"]


async def test_recall_without_a_user_is_empty_and_remember_says_why(db_url: str) -> None:
    from frontdesk.errors import UserError

    seen: list[Any] = []

    class Nothing(BaseModel):
        pass

    async def handler(request: Nothing, context: HandlerContext) -> Outcome:
        seen.append(await context.memory.recall())
        try:
            await context.memory.remember("x")
        except UserError as e:
            seen.append(str(e))
        return Outcome(instruction="ok")

    def model(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "NOTHING", "reason": "x"}
        if request.expert == "request":
            return {"request": {}}
        return "ok"

    category = Category(name="NOTHING", description="Nothing", request=Nothing, handler=handler)
    orch = Orchestrator([category], model=FunctionModel(model), store=db_url)
    await orch.handle("c-1", "hi")
    await orch.aclose()
    assert seen[0] == [] and "user_id" in seen[1]


async def test_a_failing_lookup_costs_the_turn_its_facts_never_the_turn(
    any_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lookup (inside the start's transaction on SQLite, a read of its own beside it on
    PostgreSQL) fails: the turn goes on without facts, and its messages are stored."""
    from sqlalchemy.exc import OperationalError

    from frontdesk.threads.memory import FullTextRetriever

    team = Team()
    orch = orchestrator(team, any_url)
    await orch.remember("kim", "Prefers replies in Hindi")

    def broken(*_: Any, **__: Any) -> list[Memory]:
        raise OperationalError("SELECT", {}, Exception("disk I/O error"))

    monkeypatch.setattr(FullTextRetriever, "retrieve_sync", broken)
    reply = await orch.handle("k1", "I'd like a recipe for tonight", user_id="kim")
    monkeypatch.undo()
    again = await orch.handle("k1", "and one for tomorrow", user_id="kim")
    thread = (await orch.user_thread("k1", user_id="kim")).as_messages()
    await orch.aclose()

    assert reply.text and not reply.handoff
    assert team.of("response")[0].memory == ""  # No facts, and no failure.
    assert "Prefers replies in Hindi" in team.of("response")[1].memory
    assert [m["role"] for m in thread] == ["user", "assistant", "user", "assistant"]
    assert again.text
