"""Several processes handling turns on one conversation through the Orchestrator."""

from __future__ import annotations

import asyncio
import multiprocessing
import uuid
from typing import Any

import pytest

from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

pytestmark = [pytest.mark.anyio, pytest.mark.processes]

PROCESSES = 4
TURNS = 50


def _echo(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "OTHER"}
    return "re: " + request.messages[-2]["content"]


def _worker(url: str, conversation: str, worker: int) -> None:
    async def run() -> None:
        orch = Orchestrator(
            potato_categories(), model=FunctionModel(_echo), store=url, lock_timeout=120
        )
        for turn in range(TURNS):
            text = f"w{worker}-t{turn}"
            await orch.handle(conversation, text, client_message_id=text)
        await orch.aclose()

    asyncio.run(run())


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, db_url: str) -> str:
    """A SQLite file, or a fresh PostgreSQL database."""
    if request.param == "postgres":
        return str(request.getfixturevalue("fresh_pg_url"))
    return db_url


async def test_processes_appending_to_one_conversation_lose_and_duplicate_nothing(
    url: str,
) -> None:
    conversation = f"conc-{uuid.uuid4().hex}"
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_worker, args=(url, conversation, w)) for w in range(PROCESSES)]
    for w in workers:
        w.start()
    for w in workers:
        await asyncio.to_thread(w.join, 300)
    assert [w.exitcode for w in workers] == [0] * PROCESSES

    orch = Orchestrator(potato_categories(), model=FunctionModel(_echo), store=url)
    path = await orch.transcript(conversation)
    everything = await orch.store.messages(conversation)
    await orch.aclose()
    expected = {f"w{w}-t{t}" for w in range(PROCESSES) for t in range(TURNS)}
    users = [m for m in path if m.role == "user"]
    assert len(path) == len(everything) == 2 * PROCESSES * TURNS
    assert sorted(m.content for m in users) == sorted(expected)
    for question, answer in zip(path[::2], path[1::2], strict=True):
        assert question.role == "user" and answer.role == "assistant"
        assert answer.parent_id == question.id
        assert answer.content == "re: " + question.content
    for parent, child in zip(path, path[1:], strict=False):
        assert child.parent_id == parent.id
