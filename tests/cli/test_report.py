"""`frontdesk report` (issue 45) over a scripted log of known conversations, on SQLite and
PostgreSQL: every count, and the cost per resolution, computed by hand below."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.cli import app
from frontdesk.errors import ModelConnectionError, TurnFailed
from frontdesk.experts.providers import FunctionModel, ModelRequest, Usage
from frontdesk.experts.providers.function import to_response
from frontdesk.orchestrator.report import build_report, two_proportion_p
from frontdesk.threads.compaction import CompactionPolicy
from frontdesk.threads.models import utcnow
from frontdesk.threads.resolution import ResolutionStore
from frontdesk.threads.store import ConversationStore

runner = CliRunner()

MODEL = "anthropic:claude-haiku-4-5"  # $1 per million input tokens, $5 per million output.
CALL_USD = 1000 * 1 / 1e6 + 100 * 5 / 1e6  # Every call: 1,000 in, 100 out = $0.0015.


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_pg_url"))
    return f"sqlite:///{tmp_path / 'report.db'}"


class Refund(BaseModel):
    order: str


class Order(BaseModel):
    bags: int


async def refund(request: Refund, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Say it is refunded.", resolves=True)


async def order(request: Order, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Ask to confirm.")


def answer(request: ModelRequest) -> Any:
    """Route on a word; every call reports 1,000 input and 100 output tokens."""
    last = str(request.messages[-1]["content"])
    if "broken" in last:
        raise ModelConnectionError("unreachable", model=MODEL)
    if request.expert == "triage":
        category = next(
            (
                c
                for w, c in (("refund", "REFUND"), ("order", "ORDER"), ("human", "HUMAN"))
                if w in last
            ),
            "OTHER",
        )
        reply: Any = {"category": category, "reason": "test"}
    elif request.expert == "request":
        asked = {"missing": ["bags"], "question": "How many?"}
        if "more" in last:
            reply = {"request": None, "need_more_info": asked}
        else:
            found = {"order": "A-1"} if "refund" in last else {"bags": 2}
            reply = {"request": found, "need_more_info": None}
    else:
        reply = "ok"
    response = to_response(reply, request, MODEL)
    return dataclasses.replace(response, usage=Usage(input_tokens=1000, output_tokens=100))


async def script(url: str) -> None:
    """Seven conversations whose figures are known (calls per turn in brackets)."""
    orch = Orchestrator(
        [
            Category(name="REFUND", description="A refund", request=Refund, handler=refund),
            Category(name="ORDER", description="An order", request=Order, handler=order),
        ],
        model=FunctionModel(answer, name=MODEL),
        store=url,
        memory=False,
        speculate=False,
    )
    await orch.handle("c1", "a refund please", user_id="u")  # REFUND, resolved by handler (3)
    r2 = await orch.handle("c2", "hello", user_id="u")  # OTHER (2), rated 5: resolved
    await orch.feedback(r2.message_id, 5, user_id="u")
    r3 = await orch.handle("c3", "hello", user_id="u")  # OTHER (2), rated 2: assumed
    await orch.feedback(r3.message_id, 2, user_id="u", comment="meh")
    await orch.handle("c4", "an order, more", user_id="u")  # ORDER asks (3): abandoned
    await orch.handle("c5", "a human please", user_id="u")  # HUMAN (2): a person resolves
    await orch.operator_reply("c5", "Sorted.", operator_id="sam")
    await orch.hand_back("c5", operator_id="sam", resolved=True)
    await orch.handle("c6", "an order", user_id="u")  # ORDER (3), no word after: assumed
    with pytest.raises(TurnFailed):  # No outcome, no cost; its marker stays: abandoned
        await orch.handle("c7", "broken", user_id="u")
    # The sweep, as `assume_after` later would run it.
    await ResolutionStore(orch.store.engine).assume(utcnow() + timedelta(seconds=1))
    await orch.aclose()


def test_the_report_of_a_scripted_log_gives_the_counts_by_hand(url: str, tmp_path: Path) -> None:
    asyncio.run(script(url))
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    result = runner.invoke(
        app,
        ["report", "--json", str(out), "--html", str(page), "--db", url],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    t = doc["total"]
    assert t["conversations"] == 7
    assert (t["resolved"], t["assumed_resolved"], t["abandoned"]) == (3, 2, 2)  # c1 c2 c5 | c3 c6
    assert t["handed_off"] == 1 and t["contained"] == 4  # c5 | c1 c2 c3 c6
    assert t["resolution_rate"] == pytest.approx(5 / 7)
    assert t["confirmed_rate"] == pytest.approx(3 / 7)
    assert t["containment"] == pytest.approx(4 / 7)
    assert t["handoff_rate"] == pytest.approx(1 / 7)
    assert t["median_wait_seconds"] is not None and t["median_wait_seconds"] >= 0
    assert (t["ratings"], t["average_rating"], t["comments"]) == (2, 3.5, 1)
    assert (t["turns"], t["failed_turns"]) == (7, 1)
    calls = 3 + 2 + 2 + 3 + 2 + 3  # c1..c6; c7 failed before any answer was kept
    assert t["cost_usd"] == pytest.approx(calls * CALL_USD)  # $0.0225
    assert t["cost_per_resolution"] == pytest.approx(0.0225 / 5)  # $0.0045
    assert t["cost_per_conversation"] == pytest.approx(0.0225 / 7)
    by = {line["label"]: line for line in doc["by_category"]}
    assert {k: v["conversations"] for k, v in by.items()} == {
        "(none)": 1,
        "HUMAN": 1,
        "ORDER": 2,
        "OTHER": 2,
        "REFUND": 1,
    }
    assert by["REFUND"]["cost_per_resolution"] == pytest.approx(3 * CALL_USD)
    assert by["ORDER"]["resolution_rate"] == pytest.approx(1 / 2)
    assert by["OTHER"]["average_rating"] == 3.5
    assert [d["conversations"] for d in doc["by_day"]] == [7]
    assert doc["unknown_models"] == []
    html = page.read_text()
    assert "<svg" in html and "Cost per resolution" in html and "REFUND" in html
    assert "REFUND" in result.output  # The table on stdout.
    none = runner.invoke(app, ["report", "--until", "2000-01-01", "--json", str(out), "--db", url])
    assert none.exit_code == 0 and json.loads(out.read_text())["total"]["conversations"] == 0
    for profile, count in (("default", 7), ("cards", 0)):
        named = runner.invoke(
            app, ["report", "--profile", profile, "--json", str(out), "--db", url]
        )
        assert named.exit_code == 0, named.output
        assert json.loads(out.read_text())["total"]["conversations"] == count
    bad = runner.invoke(app, ["report", "--since", "last week", "--db", url])
    assert bad.exit_code == 2 and "--since 'last week'" in bad.output


def test_two_proportion_p_value() -> None:
    # 60/100 against 40/100: z = 2.828..., two-sided p = 0.00468 (a textbook figure).
    assert two_proportion_p(60, 100, 40, 100) == pytest.approx(0.004678, abs=1e-5)
    assert two_proportion_p(5, 10, 5, 10) == pytest.approx(1.0)
    assert two_proportion_p(0, 0, 1, 2) is None


def with_jobs(request: ModelRequest) -> Any:
    """`answer`, and the experts that run after a reply: the memory expert (one fact) and
    the summariser, each 1,000 input and 100 output tokens too."""
    if request.expert == "memory":
        reply: Any = {"facts": [{"text": "Lives in Pune", "key": "home_city"}]}
    elif request.expert == "summariser":
        reply = "The customer said hello twice."
    else:
        return answer(request)
    response = to_response(reply, request, MODEL)
    return dataclasses.replace(response, usage=Usage(input_tokens=1000, output_tokens=100))


async def script_with_jobs(url: str) -> dict[str, int]:
    """One conversation of two OTHER turns (2 calls each); the first states a fact (the
    memory expert, 1 call), the second passes the compaction threshold (the summariser,
    1 call). Returns the calls each expert got."""
    calls: dict[str, int] = {}

    def counted(request: ModelRequest) -> Any:
        calls[request.expert] = calls.get(request.expert, 0) + 1
        return with_jobs(request)

    orch = Orchestrator([], model=FunctionModel(counted, name=MODEL), store=url, speculate=False)
    orch.compaction_policy = CompactionPolicy(threshold=1, keep_exchanges=1)
    await orch.handle("j1", "I live in Pune", user_id="u")
    await orch.drain()
    await orch.handle("j1", "hello", user_id="u")
    await orch.drain()
    await ResolutionStore(orch.store.engine).assume(utcnow() + timedelta(seconds=1))
    await orch.aclose()
    return calls


def test_the_summariser_and_memory_expert_cost_counts_per_resolution(
    url: str, tmp_path: Path
) -> None:
    calls = asyncio.run(script_with_jobs(url))
    # By hand: 2 turns of triage + response, 1 memory call, 1 summary: 6 calls of $0.0015.
    assert calls == {"triage": 2, "response": 2, "memory": 1, "summariser": 1}
    out = tmp_path / "jobs.json"
    result = runner.invoke(app, ["report", "--json", str(out), "--db", url])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    t = doc["total"]
    assert (t["conversations"], t["assumed_resolved"]) == (1, 1)
    assert t["cost_usd"] == pytest.approx(6 * CALL_USD)  # $0.009
    assert t["cost_per_conversation"] == pytest.approx(0.009)
    assert t["cost_per_resolution"] == pytest.approx(0.009)
    assert doc["job_costs_counted"] is True

    async def without_log() -> float:
        store = await ConversationStore.open(url)
        try:
            return (await build_report(store)).total.cost_usd
        finally:
            await store.aclose()

    # The turns' outcomes alone hold the 4 turn calls: the other 2 are the audit's.
    assert asyncio.run(without_log()) == pytest.approx(4 * CALL_USD)
