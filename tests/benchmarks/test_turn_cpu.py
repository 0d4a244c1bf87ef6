"""The CPU-per-turn benchmark counts every turn and every thread of the process."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from benchmarks.turn_cpu import run
from frontdesk.orchestrator import Orchestrator

pytestmark = pytest.mark.anyio


async def test_the_cpu_figures_cover_the_windows_the_run_reaches() -> None:
    figures = await run(20)
    assert figures["turns"] == 20
    assert figures["cpu10_ms"] > 0
    assert "cpu100_ms" not in figures  # Turn 125 was never reached.
    assert figures["cpu_total_ms"] >= 10 * figures["cpu10_ms"] * 0.5


async def test_conversations_are_counted_together_and_the_collector_is_given_back() -> None:
    """With several conversations every turn is counted, each conversation its own texts;
    without collection the collector is off only during the turns."""
    assert gc.isenabled()
    seen: list[bool] = []
    handle = Orchestrator.handle

    async def spy(self: Orchestrator, conversation_id: str, text: str, **kw: Any) -> Any:
        seen.append(gc.isenabled())
        texts.setdefault(conversation_id, []).append(text)
        return await handle(self, conversation_id, text, **kw)

    texts: dict[str, list[str]] = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Orchestrator, "handle", spy)
        figures = await run(15, conversations=2, collect=False)
    assert figures["conversations"] == 2 and figures["cpu10_ms"] > 0
    assert seen == [False] * 30 and gc.isenabled()
    assert len(texts) == 2 and not set(texts["conv-0"]) & set(texts["conv-1"])
