"""Text erased between two turns of a conversation (retention, here run as another process
would, on the database) is never sent to a model again, though the process answering
keeps the path of its last turn (`threads/_path_cache.py`); nor is a summary a background
compaction added meanwhile missed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from frontdesk import Category, HandlerContext, Orchestrator, Outcome
from frontdesk.db import create_engine, dispose_engine, run_write
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.labels import SUMMARY_LABEL
from frontdesk.threads import erasure
from frontdesk.threads.summaries import SummaryStore

pytestmark = pytest.mark.anyio

SECRET = "my pin is 80417"


class Anything(BaseModel):
    topic: str


async def answer(_request: BaseModel, _context: HandlerContext) -> Outcome:
    return Outcome(instruction="Say it is done.")


HELP = Category(name="HELP", description="Anything", request=Anything, handler=answer)


class Seen:
    """What the models were sent, per turn."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def model(self, request: ModelRequest) -> Any:
        self.texts += [str(m["content"]) for m in request.messages]
        if request.expert == "triage":
            return {"category": "HELP", "reason": "test"}
        if request.expert == "request":
            return {"request": {"topic": "help"}}
        return "Done."


async def test_text_erased_between_turns_is_not_sent_and_a_new_summary_is(any_url: str) -> None:
    seen = Seen()
    orch = Orchestrator([HELP], model=FunctionModel(seen.model), store=any_url, memory=False)
    try:
        await orch.handle("c", SECRET, client_message_id="m-1")
        await orch.handle("c", "and another thing", client_message_id="m-2")
        seen.texts.clear()
        await orch.handle("c", "still there?", client_message_id="m-3")
        assert any(SECRET in text for text in seen.texts)  # The path holds it until erased.

        other = create_engine(any_url)  # Another process's connection, not the orchestrator's.
        try:
            later = datetime.now(UTC) + timedelta(days=1)
            await run_write(other, lambda conn: erasure.age_out(conn, later))
        finally:
            await dispose_engine(other)
        seen.texts.clear()
        await orch.handle("c", "what did I say?", client_message_id="m-4")
        assert seen.texts and not any(SECRET in text for text in seen.texts)
        assert any(erasure.ERASED in text for text in seen.texts)

        leaf = await orch.store.active_leaf("c")
        assert leaf is not None
        path = await orch.store.path(leaf.id)
        await SummaryStore(orch.store.engine).add(
            conversation_id="c",
            covers_until_message_id=path[-1].id,  # The reply just written.
            content="the customer asked things",
            token_count=5,
            covered_messages=len(path),
        )
        seen.texts.clear()
        await orch.handle("c", "and now?", client_message_id="m-5")
        assert any(text.startswith(SUMMARY_LABEL) for text in seen.texts)
        assert not any(erasure.ERASED in text for text in seen.texts)  # Behind the cut.
    finally:
        await orch.aclose()
