"""A small shop for the service's tests: deterministic models, a handler whose runs are
counted across processes, and a way to stall or fail a turn.

`build` is what `frontdesk serve --app tests.service._shop:build` loads in each worker.

    "a person please"   -> HUMAN (hand-off)
    "count ..."         -> COUNT (its handler appends a line to $FRONTDESK_TEST_RUNS)
    "outage ..."        -> the response expert fails (a provider outage: 503)
    "count flaky ..."   -> COUNT, and the response expert's stream breaks while the file
                           $FRONTDESK_TEST_FLAKY exists (the handler has run by then)
    "remember that X"   -> the memory expert remembers X (after the reply)
    "send ..."          -> SEND (confirm first: "Send £5 to Bob?"; its handler's reply
                           is approved wording, "Sent £5 to Bob.")
    "that's all ..."    -> OTHER; the response expert judges that the customer closed
                           the conversation (its reply ends with the closing tag)
    anything else       -> OTHER
The reply is "You said: <text>." (streamed in chunks by the FunctionModel).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.errors import ProviderOverloaded
from frontdesk.experts.providers import FunctionModel, ModelRequest, StreamCut

RUNS_ENV = "FRONTDESK_TEST_RUNS"
FLAKY_ENV = "FRONTDESK_TEST_FLAKY"


class CountRequest(BaseModel):
    """Nothing to extract."""

    note: str = "x"


def record_run(conversation_id: str) -> None:
    """One line per handler run, in the file $FRONTDESK_TEST_RUNS names (any process)."""
    path = os.environ.get(RUNS_ENV)
    if path:
        with Path(path).open("a", encoding="utf-8") as f:
            f.write(f"{conversation_id} {os.getpid()}\n")


async def count(request: CountRequest, context: HandlerContext) -> Outcome:
    record_run(context.conversation_id)
    return Outcome(instruction="Say it was counted.")


COUNT = Category(
    name="COUNT",
    description="Counting things",
    request=CountRequest,
    handler=count,
    examples=["count this"],
)


class SendRequest(BaseModel):
    """A payment (always £5 to Bob here)."""

    amount: int = 5
    payee: str = "Bob"


async def send(request: SendRequest, context: HandlerContext) -> Outcome:
    record_run(context.conversation_id)
    text = f"Sent £{request.amount} to {request.payee}."
    return Outcome(instruction="Say it was sent.", reply=text)


SEND = Category(
    name="SEND",
    description="Sending money",
    request=SendRequest,
    handler=send,
    examples=["send 5 to Bob"],
    confirm=lambda r: f"Send £{r.amount} to {r.payee}?",  # type: ignore[attr-defined]
)


def last_user_text(request: ModelRequest) -> str:
    """The last user turn's own text (without the memory blocks that open it)."""
    users = [m["content"] for m in request.messages if m["role"] == "user"]
    blocks = request.memory + "\n\n" if request.memory else ""
    return str(users[-1]).removeprefix(blocks) if users else ""


def answer(request: ModelRequest) -> Any:
    text = last_user_text(request)
    if request.expert == "triage":
        if "person" in text:
            return {"category": "HUMAN", "reason": "asked for a person"}
        if text.startswith("count"):
            return {"category": "COUNT", "reason": "counting"}
        if text.startswith("send"):
            return {"category": "SEND", "reason": "a payment"}
        return {"category": "OTHER", "reason": "chat"}
    if request.expert == "request":
        return {
            "request": {"amount": 5, "payee": "Bob"} if text.startswith("send") else {"note": "x"}
        }
    if request.expert == "summariser":
        return "summary"
    if request.expert == "memory":  # after each reply of a turn with a user id
        fact = text.removeprefix("remember that ")
        return {"facts": [{"text": fact, "key": None}] if fact != text else []}
    flaky = os.environ.get(FLAKY_ENV)
    if "flaky" in text and flaky and Path(flaky).exists():
        # The stream breaks after its first words: after the handler acted, the one reply
        # failure that still fails the turn (another falls back to a plain reply).
        return StreamCut(
            text="You said",
            error=ProviderOverloaded("overloaded", status_code=529, model="function"),
        )
    if text.startswith("outage"):
        raise ProviderOverloaded("overloaded", status_code=529, model="function")
    if text.startswith("that's all"):  # The closing tag, split across the 4-character chunks.
        return f"You said: {text}. Goodbye! [closes]"
    return f"You said: {text}."


def shop_model() -> FunctionModel:
    return FunctionModel(answer, chunk_chars=4)


def build(store: str, model: Any = None) -> Orchestrator:
    """The test shop on `store` (the `--app` factory; `model` is ignored: always the double)."""
    return Orchestrator([COUNT, SEND], model=shop_model(), store=store, lock_timeout=30.0)


INSTANCE = Orchestrator([COUNT], model=shop_model(), store="sqlite:///never-opened.db")
"""An app given as an instance, with a store of its own that `--db` replaces."""
