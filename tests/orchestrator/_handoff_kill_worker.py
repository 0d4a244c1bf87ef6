"""A turn that hands off and SIGKILLs its process right after a commit:
`python _handoff_kill_worker.py URL POINT`.

Points:
    human_after_finish      triage says HUMAN; killed right after the reply's transaction
    handler_after_outcome   the handler returns `Outcome(handoff=...)`; killed right after
                            the outcome is stored (before the response expert)
    handler_after_finish    the same handler; killed right after the reply's transaction
    none                    no kill (the parent's retry uses this module's pieces)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from pydantic import BaseModel

from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

CONVERSATION = "kill-handoff"
CLIENT_ID = "m-1"
TEXTS = {"human": "I want a person", "handler": "close my account"}


class Closure(BaseModel):
    """An account to close."""

    account: str


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def text_for(point: str) -> str:
    return TEXTS["human" if point.startswith("human") or point == "none-human" else "handler"]


def orchestrator(url: str) -> Orchestrator:
    async def close(request: Closure, context: HandlerContext) -> Outcome:
        return Outcome(
            instruction="Tell the user a person will confirm the closure.",
            handoff="account closure needs a person",
        )

    def model(request: ModelRequest) -> Any:
        last = [m["content"] for m in request.messages if m["role"] == "user"][-1]
        if request.expert == "triage":
            if "person" in str(last):
                return {"category": "HUMAN", "reason": "asked for a person"}
            return {"category": "CLOSE", "reason": "closure"}
        if request.expert == "request":
            return {"request": {"account": "A-1"}}
        return "A person from the team will take over shortly."

    closure = Category(
        name="CLOSE", description="Closing an account.", request=Closure, handler=close
    )
    return Orchestrator([closure], model=FunctionModel(model), store=url, lock_ttl=1.0)


async def _main(url: str, point: str) -> None:
    orch = orchestrator(url)
    await orch.open()
    store = orch.store
    save, finish = store.save_outcome, store.finish_turn

    async def save_then_die(*args: Any, **kwargs: Any) -> Any:
        opened = await save(*args, **kwargs)
        if point == "handler_after_outcome":
            die()
        return opened

    async def finish_then_die(*args: Any, **kwargs: Any) -> Any:
        opened = await finish(*args, **kwargs)
        if point.endswith("after_finish"):
            die()
        return opened

    store.save_outcome = save_then_die  # type: ignore[method-assign]
    store.finish_turn = finish_then_die  # type: ignore[method-assign]
    await orch.handle(CONVERSATION, text_for(point), client_message_id=CLIENT_ID)
    await orch.aclose()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2]))
