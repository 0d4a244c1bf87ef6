"""`frontdesk thread compact CONV` and the marking of what a summary replaced in `thread show`."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.examples.potato_shop import build
from frontdesk.threads.store import ConversationStore
from frontdesk.threads.summaries import SummaryStore

WIDE = {"COLUMNS": "200", "NO_COLOR": "1"}
TURNS = [
    "Hi, I'm Priya. My order 88213, placed on 3 March, arrived 40 minutes late.",
    "Do you also sell sweet potatoes?",
    "Do you deliver on Sundays?",
    "Thanks, that's helpful",
]


async def _chat(url: str) -> None:
    orch = build(model="offline", store=url)
    for text in TURNS:
        await orch.handle("conv-1", text)
    await orch.aclose()


async def _summaries(url: str) -> list[str]:
    store = await ConversationStore.open(url)
    try:
        return [s.content for s in await SummaryStore(store.engine).for_conversation("conv-1")]
    finally:
        await store.aclose()


def test_compact_forces_a_summary_and_show_marks_what_it_replaced(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    asyncio.run(_chat(url))
    assert asyncio.run(_summaries(url)) == []

    runner = CliRunner()
    result = runner.invoke(
        app, ["thread", "compact", "conv-1", "--db", url, "--model", "offline"], env=WIDE
    )
    assert result.exit_code == 0, result.output
    assert "compacted: 4 messages summarised" in result.output
    summaries = asyncio.run(_summaries(url))
    assert len(summaries) == 1 and "88213" in summaries[0]

    shown = runner.invoke(app, ["thread", "show", "conv-1", "--db", url], env=WIDE)
    assert shown.exit_code == 0, shown.output
    # The first two exchanges are summarised (marked); the last two are sent verbatim.
    assert shown.output.count("≡ summarised") == 4
    lines = [line for line in shown.output.splitlines() if "●" in line]
    assert all("summarised" in line for line in lines[:4])
    assert not any("summarised" in line for line in lines[4:])
    assert len(lines) == 2 * len(TURNS)

    # Nothing is left to compact: only the kept exchanges remain unsummarised.
    again = runner.invoke(
        app, ["thread", "compact", "conv-1", "--db", url, "--model", "offline"], env=WIDE
    )
    assert again.exit_code == 0, again.output
    assert "nothing to compact" in again.output


def test_compact_of_an_unknown_conversation_fails_clearly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    result = CliRunner().invoke(
        app, ["thread", "compact", "nope", "--db", url, "--model", "offline"], env=WIDE
    )
    assert result.exit_code == 2  # Unknown conversation: exit 2, as the README says.
    assert "no conversation 'nope'" in result.output
