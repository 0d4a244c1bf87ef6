"""A turn that SIGKILLs its own process at one point: `python _kill_worker.py URL POINT DIR`.

The category TRANSFER moves money through a "bank" that deduplicates on the key it is
given (as a payment API does): the handler passes `HandlerContext.idempotency_key`. Every
handler run appends a line to DIR/runs, every transfer the bank carries out to DIR/bank.

Points:
    in_handler      after the bank call, before the handler returns (outcome not stored)
    after_outcome   right after the outcome is stored
    in_response     when the response expert is called
    before_finish   when the reply is about to be written
    between_steps   a message with two requests (`TWO`: a transfer and a bill paid), right
                    after the first one's outcome is stored, before the second's handler
    none            no kill (the parent's healthy retry uses this module's pieces)
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator
from frontdesk.threads.store import FinishedTurn

CONVERSATION = "kill"
TEXT = "send 10 to bob"
CLIENT_ID = "m-1"
TWO = "send 10 to bob and pay the gas bill"


class Transfer(BaseModel):
    """Money to send."""

    amount: int
    to: str


def die() -> None:
    """SIGKILL this process: no `finally`, no flush, as a crash or an OOM kill."""
    os.kill(os.getpid(), signal.SIGKILL)


def bank_transfer(folder: Path, key: str, amount: int, to: str) -> None:
    """The bank: carries a transfer out once per key (its own durable record)."""
    ledger = folder / "bank"
    done = ledger.read_text().split() if ledger.exists() else []
    if key in done:
        return
    with ledger.open("a") as f:
        f.write(f"{key}\n")
        f.flush()
        os.fsync(f.fileno())


def orchestrator(url: str, folder: Path, point: str) -> Orchestrator:
    """The bank's bot, dying at `point`."""

    async def send(request: Transfer, context: HandlerContext) -> Outcome:
        with (folder / "runs").open("a") as f:
            f.write(f"{context.idempotency_key}\n")
        bank_transfer(folder, context.idempotency_key, request.amount, request.to)
        if point == "in_handler":
            die()
        return Outcome(
            instruction=f"Tell the user {request.amount} went to {request.to} ({context.category})."
        )

    def model(request: ModelRequest) -> Any:
        if request.expert == "triage":
            said = str(request.messages[-1]["content"])
            if "gas bill" in said:
                return {"categories": ["TRANSFER", "BILL"], "reason": "money, twice"}
            return {"category": "TRANSFER", "reason": "money"}
        if request.expert == "request":
            return {"request": {"amount": 10, "to": "bob"}}
        if point == "in_response":
            die()
        return "Done: 10 went to bob."

    transfer = Category(
        name="TRANSFER", description="Sending money.", request=Transfer, handler=send
    )
    bill = Category(name="BILL", description="Paying a bill.", request=Transfer, handler=send)
    orch = Orchestrator([transfer, bill], model=FunctionModel(model), store=url, lock_ttl=1.0)
    return orch


async def _main(url: str, point: str, folder: Path) -> None:
    orch = orchestrator(url, folder, point)
    await orch.open()
    store = orch.store
    save, finish = store.save_outcome, store.finish_turn

    async def save_then_die(*args: Any, **kwargs: Any) -> None:
        await save(*args, **kwargs)
        if point in ("after_outcome", "between_steps"):
            die()

    async def die_then_finish(*args: Any, **kwargs: Any) -> FinishedTurn:
        if point == "before_finish":
            die()
        return await finish(*args, **kwargs)

    store.save_outcome = save_then_die  # type: ignore[method-assign]
    store.finish_turn = die_then_finish  # type: ignore[method-assign]
    text = TWO if point == "between_steps" else TEXT
    await orch.handle(CONVERSATION, text, client_message_id=CLIENT_ID)
    await orch.aclose()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2], Path(sys.argv[3])))
