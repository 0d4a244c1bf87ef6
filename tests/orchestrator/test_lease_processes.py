"""The conversation lease across processes on PostgreSQL: a stalled turn is fenced off, and
a crashed holder's lease is taken over within seconds."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from frontdesk.errors import SAFE_REPLY
from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator
from frontdesk.threads.store import DEFAULT_LEASE_TTL

pytestmark = [pytest.mark.anyio, pytest.mark.postgres, pytest.mark.processes]

STALL = 4.0
"""Seconds the stalled handler blocks its event loop (no heartbeat can run meanwhile)."""
TTL = 1.0


class Transfer(BaseModel):
    amount: int


def _exists(path: str) -> bool:
    return Path(path).exists()


def _bank(ready: str) -> Category:
    async def transfer(request: Transfer, context: HandlerContext) -> Outcome:
        Path(ready).touch()  # noqa: ASYNC240 (the handler blocks on purpose)
        time.sleep(STALL)  # noqa: ASYNC251 A slow synchronous bank call: no renewal runs.
        return Outcome(instruction=f"Say that {request.amount} was sent")

    return Category(
        name="TRANSFERS",
        description="Sending money",
        request=Transfer,
        handler=transfer,
        examples=["send 100 to Bob"],
    )


def _stalled_turn(url: str, conversation: str, ready: str, result: str) -> None:
    """Run in a separate process: a turn whose handler stalls past the lease's ttl."""

    def fake(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "TRANSFERS", "reason": "money"}
        if request.expert == "request":
            return {"request": {"amount": 100}}
        return "100 sent"

    async def run() -> str:
        orch = Orchestrator(
            [_bank(ready)], model=FunctionModel(fake), store=url, lock_ttl=TTL, audit=True
        )
        try:
            await orch.handle(conversation, "send 100", user_id="u", client_message_id="a-1")
        except Exception as e:
            return type(e).__name__
        finally:
            await orch.aclose()
        return "answered"

    Path(result).write_text(asyncio.run(run()))


async def test_a_turn_that_stalls_past_its_lease_is_fenced_off(
    fresh_pg_url: str, tmp_path: Path
) -> None:
    ready, result = str(tmp_path / "ready"), tmp_path / "result"
    ctx = multiprocessing.get_context("spawn")
    worker = ctx.Process(target=_stalled_turn, args=(fresh_pg_url, "c", ready, str(result)))
    worker.start()
    try:
        for _ in range(600):
            if _exists(ready):
                break
            await asyncio.sleep(0.02)
        assert _exists(ready), "the worker never reached its handler"
        orch = Orchestrator(
            [_bank(str(tmp_path / "unused"))],
            model=FunctionModel(lambda r: {"category": "OTHER"} if r.expert == "triage" else "hi"),
            store=fresh_pg_url,
            lock_ttl=TTL,
        )
        started = time.monotonic()
        reply = await orch.handle("c", "hello", user_id="u", client_message_id="b-1")
        took_over = time.monotonic() - started
        assert took_over < STALL - 1, "the second turn waited for the stalled one"
    finally:
        worker.join(timeout=60)
        if worker.is_alive():
            worker.kill()
    assert result.read_text() == "LeaseLost"
    transcript = await orch.transcript("c", user_id="u")
    branches = await orch.branches("c", user_id="u")
    store = orch.store
    everything = await store.messages("c")
    audit = orch.audit_log
    assert audit is not None
    verified = await audit.verify("c")
    await orch.aclose()
    # The overtaken turn's question is answered by a failed-turn marker (the safe reply), so
    # the thread still alternates; its own reply never lands.
    assert [(m.content, m.failed) for m in transcript] == [
        ("send 100", False),
        (SAFE_REPLY, True),
        ("hello", False),
        (reply.text, False),
    ]
    assert [m.id for m in branches] == [reply.message_id]  # No fork.
    assert "100 sent" not in [m.content for m in everything]  # The stalled reply never landed.
    assert verified.ok


def _hung_turn(url: str, conversation: str) -> None:
    """Run in a separate process: store a message, then hang in the response expert."""

    async def fake(request: ModelRequest) -> Any:
        if request.expert == "triage":
            return {"category": "OTHER", "reason": "chat"}
        await asyncio.sleep(3600)
        return "never"

    async def run() -> None:
        orch = Orchestrator([], model=FunctionModel(fake), store=url)  # The default ttl.
        await orch.handle(conversation, "hello?", user_id="u", client_message_id="m-1")

    asyncio.run(run())


async def test_a_crashed_holders_lease_is_taken_over_within_seconds(fresh_pg_url: str) -> None:
    ctx = multiprocessing.get_context("spawn")
    worker = ctx.Process(target=_hung_turn, args=(fresh_pg_url, "c"))
    worker.start()
    orch = Orchestrator(
        [],
        model=FunctionModel(lambda r: {"category": "OTHER"} if r.expert == "triage" else "hi"),
        store=fresh_pg_url,
    )
    try:
        store = (await orch.open()).store
        for _ in range(600):
            if await store.messages("c"):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(DEFAULT_LEASE_TTL / 2)  # The heartbeat kept it meanwhile.
        assert not await store.try_lease("conversation:c", "probe", ttl=1)
    finally:
        worker.kill()
        worker.join()
    started = time.monotonic()
    reply = await orch.handle("c", "hello?", user_id="u", client_message_id="m-1")
    waited = time.monotonic() - started
    await orch.aclose()
    assert reply.text == "hi"
    assert waited < DEFAULT_LEASE_TTL + 1, f"took {waited:.1f} s to take over a dead lease"
    print(f"crashed holder's lease taken over after {waited:.2f} s")
