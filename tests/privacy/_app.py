"""The privacy tests' app: a telecom desk whose request expert extracts an account number.

Also a worker: `python _app.py URL KEY POINT` erases user ZOE and SIGKILLs itself once the
erasure step POINT has committed (the parent then runs the erasure again); with a fifth
argument `request`, the erasure is first recorded with its job (`request_erasure`, as
`Orchestrator.erase_user` does), so a job runner finishes it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator, erasure

ACCOUNT = "40-11-22 99887766"
ZOE = "zoë@example.com"
ZOE_TEXT = "Zoë Ångström here, account " + ACCOUNT
BOB = "bob"
BOB_TEXT = "Bob Marley, account 11223344"
SENT: list[ModelRequest] = []


class Account(BaseModel):
    """The account the user asks about."""

    account: str


async def lookup(request: Account, context: HandlerContext) -> Outcome:
    return Outcome(
        instruction=f"Tell the user account {request.account} is active",
        data={"account": request.account, "balance": 12},
    )


def categories() -> list[Category]:
    return [
        Category(name="ACCOUNT", description="Account questions", request=Account, handler=lookup)
    ]


def _answer(request: ModelRequest) -> Any:
    SENT.append(request)
    if request.expert == "triage":
        return {"category": "ACCOUNT", "reason": "asks about an account"}
    last = str(request.messages[-1]["content"]) if request.messages else ""
    if request.expert == "request":
        number = ACCOUNT if ACCOUNT in last else "11223344"
        return {"request": {"account": number}, "need_more_info": None}
    if request.expert == "summariser":
        return "summary"
    return "Your account " + (ACCOUNT if ACCOUNT in last else "11223344") + " is active."


def orchestrator(url: str, key: str | None = None, **kwargs: Any) -> Orchestrator:
    return Orchestrator(
        categories(), model=FunctionModel(_answer), store=url, audit_key=key, **kwargs
    )


def worker_app() -> Orchestrator:
    """For `frontdesk worker --app` (the master key from `FRONTDESK_MASTER_KEY`)."""
    return Orchestrator(categories(), model=FunctionModel(_answer))


def replay_app() -> Orchestrator:
    """For `frontdesk audit replay --app`."""
    return Orchestrator(categories(), model=FunctionModel(_answer), audit=False)


async def record(url: str, key: str | None, *, turns: int = 12, conversations: int = 1) -> None:
    orch = orchestrator(url, key)
    try:
        for c in range(conversations):
            for i in range(turns):
                await orch.handle(f"zoe-{c}", f"{ZOE_TEXT} (turn {i})", user_id=ZOE)
        await orch.handle("bob-0", BOB_TEXT, user_id=BOB)
    finally:
        await orch.aclose()


async def _erase_and_die(url: str, key: str, point: str, how: str = "steps") -> None:
    orch = orchestrator(url, key)
    p = await orch.open()
    assert orch.audit_log is not None

    def after(step: str) -> None:
        if step == point:
            os.kill(os.getpid(), signal.SIGKILL)

    run = erasure.request_erasure if how == "request" else erasure.erase_user
    await run(p.store.engine, orch.audit_log, ZOE, after_step=after)


if __name__ == "__main__":
    asyncio.run(_erase_and_die(*sys.argv[1:5]))
