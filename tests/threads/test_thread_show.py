"""`frontdesk thread show`: the transcript tree, the active path marked."""

from __future__ import annotations

import asyncio
from pathlib import Path

from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.threads.store import ConversationStore

WIDE = {"COLUMNS": "200"}
"""Rich wraps at the terminal width; a wide one keeps each message on one line."""


async def _conversation(url: str) -> None:
    store = await ConversationStore.open(url)
    try:
        u1, _ = await store.add_user_message("conv-1", "I'd like a bag of purple potatoes")
        a1 = await store.add_assistant_message(u1.id, "Please confirm one bag of purple.")
        u2, _ = await store.add_user_message("conv-1", "Actually, two bags")
        await store.add_assistant_message(u2.id, "Please confirm two bags.")
        edit, _ = await store.add_user_message("conv-1", "Actually, three bags", parent_id=a1.id)
        await store.add_assistant_message(edit.id, "Please confirm three bags.")
        await store.add_assistant_message(edit.id, "Three bags: please confirm.")
    finally:
        await store.aclose()


def test_the_active_path_is_shown_and_marked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    asyncio.run(_conversation(url))

    result = CliRunner().invoke(app, ["thread", "show", "conv-1", "--db", url], env=WIDE)

    assert result.exit_code == 0, result.output
    out = result.output
    assert "conversation conv-1 (7 messages, 3 branches)" in out
    for text in ["purple potatoes", "one bag of purple", "three bags", "Three bags: please"]:
        assert text in out
    assert "two bags" not in out and "Please confirm three bags." not in out
    assert out.count("●") == 4 and "○" not in out
    assert out.count("(version 2 of 2)") == 2
    assert "← active leaf" in out.splitlines()[-1]


def test_all_branches_shows_every_message_nested_at_branch_points(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    asyncio.run(_conversation(url))

    result = CliRunner().invoke(
        app, ["thread", "show", "conv-1", "--all-branches", "--db", url], env=WIDE
    )

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for text in ["Actually, two bags", "Please confirm two bags.", "Please confirm three bags."]:
        assert any(text in line for line in lines)
    # Four active messages and two active branches; three other messages and two branches.
    assert result.output.count("●") == 6 and result.output.count("○") == 5
    assert "● branch 2 of 2" in result.output and "○ branch 1 of 2" in result.output
    # The first exchange is at the top level; the alternatives nest under the branch point.
    depth = {
        text: next(len(line) - len(line.lstrip(" │├└─")) for line in lines if text in line)
        for text in ["purple potatoes", "two bags", "three bags", "Three bags: please"]
    }
    assert depth["purple potatoes"] < depth["two bags"] == depth["three bags"]
    assert depth["three bags"] < depth["Three bags: please"]


def test_an_unknown_conversation_says_so(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'frontdesk.db'}"
    asyncio.run(_conversation(url))  # A database that holds another conversation.
    result = CliRunner().invoke(app, ["thread", "show", "nope", "--db", url])
    assert result.exit_code == 2  # Unknown conversation: exit 2, as the README says.
    assert "no conversation 'nope'" in result.output


def test_a_failed_turn_shows_its_safe_reply_flagged(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'frontdesk.db'}"

    async def failed_turn() -> None:
        store = await ConversationStore.open(url)
        try:
            user, _ = await store.add_user_message("conv-1", "where is my order?")
            await store.mark_failed(user, "Sorry, please try again in a moment.")
        finally:
            await store.aclose()

    asyncio.run(failed_turn())
    result = CliRunner().invoke(app, ["thread", "show", "conv-1", "--db", url], env=WIDE)

    assert result.exit_code == 0, result.output
    last = result.output.splitlines()[-1]
    assert "try again in a moment" in last and "✗ failed turn" in last
