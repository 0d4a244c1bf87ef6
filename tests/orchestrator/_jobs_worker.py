"""Processes for the job kill tests (tests/orchestrator/test_job_kill_points.py).

    python _jobs_worker.py reply URL USER      one turn stating a fact, then SIGKILL at once
    python _jobs_worker.py turns URL USER...   each USER says Pune, then Mumbai (jobs="worker")

`app()` is the `--app` of `frontdesk worker` in those tests: the memory expert learns from
`PHRASES`, sleeping `FRONTDESK_TEST_LEARN_SLEEP` seconds first (a random 0-50 ms when
unset), and appends `started <user message>` / `learned <user message>` lines to the file
named by `FRONTDESK_TEST_LOG` (when set).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from typing import Any

from pydantic import BaseModel

from frontdesk.experts import Category, HandlerContext, Outcome
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.orchestrator import Orchestrator

PHRASES = {
    "i live in pune": {"text": "Lives in Pune", "key": "home_city"},
    "moved to mumbai": {"text": "Lives in Mumbai", "key": "home_city"},
}
FACT_TEXT = "I moved to Mumbai last month"


class Question(BaseModel):
    """Nothing to extract."""

    topic: str = "anything"


async def _answer(request: Question, context: HandlerContext) -> Outcome:
    return Outcome(instruction="Answer the user kindly.")


CHAT = Category(name="CHAT", description="Anything", request=Question, handler=_answer)


def _log(line: str) -> None:
    path = os.environ.get("FRONTDESK_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


async def _model(request: ModelRequest) -> Any:
    if request.expert == "triage":
        return {"category": "CHAT", "reason": "test"}
    if request.expert == "request":
        return {"request": {"topic": "anything"}}
    if request.expert == "memory":
        text = str(request.messages[-1]["content"])
        if request.memory:  # The remembered facts' blocks open the last user turn.
            text = text.removeprefix(request.memory + "\n\n")
        _log(f"started {text}")
        sleep = os.environ.get("FRONTDESK_TEST_LEARN_SLEEP")
        await asyncio.sleep(float(sleep) if sleep else random.uniform(0.0, 0.05))
        facts = [f for phrase, f in PHRASES.items() if phrase in text.lower()]
        _log(f"learned {text}")
        return {"facts": facts}
    return "Noted, thank you."


def app(**kwargs: Any) -> Orchestrator:
    """The shop of these tests (the `--app` of `frontdesk worker` and `serve`)."""
    return Orchestrator([CHAT], model=FunctionModel(_model), **kwargs)


async def _reply_then_die(url: str, user: str) -> None:
    orch = app(store=url)
    await orch.handle(f"conv-{user}", FACT_TEXT, user_id=user)
    os.kill(os.getpid(), signal.SIGKILL)  # Right after the reply: no drain, no aclose.


async def _turns(url: str, users: list[str]) -> None:
    orch = app(store=url, jobs="worker")
    for user in users:
        await orch.handle(f"conv-{user}", "I live in Pune", user_id=user)
        await orch.handle(f"conv-{user}", FACT_TEXT, user_id=user)
    began = time.monotonic()
    await orch.drain(timeout=60)  # The workers run them; this waits for the ones it recorded.
    print(f"drained in {time.monotonic() - began:.2f} s")
    await orch.aclose()


if __name__ == "__main__":
    mode, url, *rest = sys.argv[1:]
    if mode == "reply":
        asyncio.run(_reply_then_die(url, rest[0]))
    elif mode == "turns":
        asyncio.run(_turns(url, rest))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
