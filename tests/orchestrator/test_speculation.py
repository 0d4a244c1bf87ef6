"""Speculative extraction (issue 14): the current category's request expert runs alongside
triage, kept when triage agrees, cancelled (and audited) when it does not."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from frontdesk.audit.replay import recorded_turns
from frontdesk.audit.transcript import build_transcript
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest, ModelResponse, Usage
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.stream import Extracted, Routed

pytestmark = pytest.mark.anyio

ORDER = {"request": {"variety": "purple", "bags": 1}}
STATUS = {"request": {"order_number": "77120"}}


@dataclass
class SlowTeam:
    """Triage and request each take `delay` seconds; every call's span is recorded."""

    delay: float = 0.2
    triage_extra: float = 0.0
    """Seconds triage takes beyond `delay`."""
    route: str = "ORDERS"
    spans: list[tuple[str, float, float, bool]] = field(default_factory=list)
    """(expert, start, end, finished) per call; `finished` false when it was cancelled."""
    requests: list[ModelRequest] = field(default_factory=list)

    async def __call__(self, request: ModelRequest) -> Any:
        self.requests.append(request)
        start = time.perf_counter()
        finished = False
        try:
            if request.expert in ("triage", "request"):
                await asyncio.sleep(self.delay)
            if request.expert == "triage":
                await asyncio.sleep(self.triage_extra)
            finished = True
        finally:
            self.spans.append((request.expert, start, time.perf_counter(), finished))
        if request.expert == "triage":
            return {"category": self.route, "reason": "test"}
        if request.expert == "request":
            answer = ORDER if "purple" in str(request.messages[-1]) else STATUS
            assert request.output_type is not None
            return ModelResponse(  # With usage, so the speculation's cost can be summed.
                output=request.output_type.model_validate(answer),
                usage=Usage(input_tokens=120, output_tokens=12),
            )
        return "Done."

    def of(self, expert: str) -> list[tuple[str, float, float, bool]]:
        return [s for s in self.spans if s[0] == expert]


async def two_turns(team: SlowTeam, db: str, *, speculate: bool = True) -> Orchestrator:
    """A first ORDERS turn, then the spans of the second turn only are kept."""
    orch = Orchestrator(
        potato_categories(), model=FunctionModel(team), store=db, speculate=speculate
    )
    await orch.handle("c", "a bag of purple please")
    team.spans.clear()
    team.requests.clear()
    return orch


async def speculation_notes(orch: Orchestrator) -> list[dict[str, Any]]:
    log = orch.audit_log
    assert log is not None
    return [e.payload for e in await log.events("c") if e.kind == "speculation"]


async def test_first_turn_runs_triage_then_request(db_url: str) -> None:
    team = SlowTeam()
    orch = Orchestrator(potato_categories(), model=FunctionModel(team), store=db_url)
    await orch.handle("c", "a bag of purple please")
    (triage,), (request,) = team.of("triage"), team.of("request")
    assert request[1] >= triage[2]  # No category yet: nothing to guess.
    assert await speculation_notes(orch) == []
    await orch.aclose()


async def test_kept_when_triage_agrees_the_request_runs_once_alongside_triage(
    db_url: str,
) -> None:
    team = SlowTeam()
    orch = await two_turns(team, db_url)
    events = [e async for e in orch.stream("c", "another bag of purple")]
    (triage,), (request,) = team.of("triage"), team.of("request")
    assert request[1] < triage[2] and triage[1] < request[2]  # The two calls overlapped.
    assert request[3]
    kinds = [type(e) for e in events if isinstance(e, Routed | Extracted)]
    assert kinds == [Routed, Extracted]  # Still routed, then extracted.
    extracted = next(e for e in events if isinstance(e, Extracted))
    assert extracted.request is not None and extracted.request.model_dump()["variety"] == "purple"
    notes = await speculation_notes(orch)
    assert len(notes) == 1 and notes[0]["kept"] is True and notes[0]["category"] == "ORDERS"
    assert notes[0]["usage"]["input_tokens"] == 120
    log = orch.audit_log
    assert log is not None and (await log.verify("c")).ok
    await orch.aclose()


async def test_cancelled_and_rerun_when_triage_disagrees(db_url: str) -> None:
    team = SlowTeam(delay=0.2)
    orch = await two_turns(team, db_url)
    team.route = "ORDER_STATUS"
    reply = await orch.handle("c", "where is order 77120?")
    requests = team.of("request")
    assert [r[3] for r in requests] == [False, True]  # Guess cancelled, then the right one.
    assert reply.category == "ORDER_STATUS" and reply.request is not None
    assert reply.request.model_dump() == STATUS["request"]
    notes = await speculation_notes(orch)
    assert len(notes) == 1 and notes[0]["kept"] is False
    assert notes[0]["category"] == "ORDERS" and notes[0]["triage_category"] == "ORDER_STATUS"
    log = orch.audit_log
    assert log is not None
    turn = reply.user_message_id
    attempts = [
        e.payload
        for e in await log.events("c")
        if e.kind == "model_attempt" and e.turn_id == turn and e.payload["expert"] == "request"
    ]
    assert len(attempts) == 2 and attempts[0]["error"]  # The cancelled call's row stays.
    assert [e.kind for e in await log.events("c") if e.turn_id == turn].count("speculation") == 1
    assert (await log.verify("c")).ok
    await orch.aclose()


async def test_a_finished_guess_for_the_wrong_category_is_discarded(db_url: str) -> None:
    team = SlowTeam(delay=0.05)
    orch = await two_turns(team, db_url)
    team.route, team.delay, team.triage_extra = "ORDER_STATUS", 0.0, 0.3
    reply = await orch.handle("c", "where is order 77120?")
    (triage,), (guess, right) = team.of("triage"), team.of("request")
    assert guess[3] and guess[2] < triage[2] <= right[1]  # The guess finished, unused.
    assert reply.category == "ORDER_STATUS" and reply.request is not None
    assert reply.request.model_dump() == STATUS["request"]
    assert [n["kept"] for n in await speculation_notes(orch)] == [False]
    log = orch.audit_log
    assert log is not None
    last = recorded_turns(build_transcript("c", await log.events("c")))[-1]
    # The discarded answer stays in the log, but a replay takes the answer the turn used.
    assert [o["request"] for o in last.outputs("request")] == [STATUS["request"]]
    assert [c.attempts[-1].speculation for c in last.view.calls if c.expert == "request"] == [
        "discarded",
        None,
    ]
    await orch.aclose()


async def test_switched_off_the_request_waits_for_triage(db_url: str) -> None:
    team = SlowTeam()
    orch = await two_turns(team, db_url, speculate=False)
    await orch.handle("c", "another bag of purple")
    (triage,), (request,) = team.of("triage"), team.of("request")
    assert request[1] >= triage[2]
    assert await speculation_notes(orch) == []
    await orch.aclose()


async def test_the_request_expert_gets_the_same_request_either_way(tmp_path: Any) -> None:
    sent: dict[bool, ModelRequest] = {}
    for speculate in (True, False):
        team = SlowTeam(delay=0.0)
        orch = await two_turns(
            team, f"sqlite:///{tmp_path / f'{speculate}.db'}", speculate=speculate
        )
        await orch.handle("c", "another bag of purple")
        (sent[speculate],) = [r for r in team.requests if r.expert == "request"]
        await orch.aclose()
    one, other = sent[True], sent[False]
    assert one.metadata["conversation_id"] == other.metadata["conversation_id"] == "c"
    # Only the turn id (a fresh message id per run) differs: the rest is the same request.
    assert dataclasses.replace(one, metadata={}) == dataclasses.replace(other, metadata={})
    assert one.cache_prefix_messages == other.cache_prefix_messages > 0


async def test_a_scripted_model_per_expert_runs_a_conversation_with_speculation_on(
    db_url: str,
) -> None:
    """Turn 2 changes category: its speculative extraction (for ORDERS) is discarded and
    gives its step back, so the extraction after triage plays it; turn 3 keeps its guess;
    turn 4 (small talk) speculates past the end of the request script, harmlessly."""
    from frontdesk.audit.export import render_html
    from frontdesk.experts.providers import ScriptedModel

    def route(category: str) -> dict[str, str]:
        return {"category": category, "reason": "scripted"}

    triage = ScriptedModel(
        [route("ORDERS"), route("ORDER_STATUS"), route("ORDER_STATUS"), route("OTHER")]
    )
    request = ScriptedModel([ORDER, STATUS, STATUS])
    response = ScriptedModel(["one", "two", "three", "four"])
    orch = Orchestrator(
        potato_categories(),
        model={
            "triage": triage,
            "request": request,
            "response": response,
            "memory": FunctionModel(lambda r: {"facts": []}),
            "default": "offline",
        },
        store=db_url,
    )
    texts = ["a bag of purple please", "where is order 77120", "77120 again?", "thanks"]
    replies = [await orch.handle("c", text, user_id="u") for text in texts]
    assert [r.text for r in replies] == ["one", "two", "three", "four"]
    assert [r.category for r in replies] == ["ORDERS", "ORDER_STATUS", "ORDER_STATUS", "OTHER"]
    assert replies[1].request is not None and replies[1].request.model_dump() == {
        "order_number": "77120"
    }
    for model in (triage, request, response):
        model.assert_complete()
    assert len(request.calls) == 3 and len(request.discarded) == 2
    notes = await speculation_notes(orch)
    assert [n["kept"] for n in notes] == [False, True, False]
    log = orch.audit_log
    assert log is not None
    view = build_transcript("c", await log.events("c"))
    await orch.aclose()
    second = view.turns[1]
    assert second.request_error is None  # The discarded call's failure is not the turn's.
    assert any(line.startswith("speculative request (discarded)") for line in second.events)
    assert [c.speculation for c in second.calls if c.expert == "request"] == ["discarded", None]
    html = render_html([view])
    assert html.count('data-speculation="discarded"') == 1  # Turn 4's call never reached it.
    assert "speculative, discarded: answer not used" in html
