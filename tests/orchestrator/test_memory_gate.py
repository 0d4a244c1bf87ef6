"""Which user messages the memory expert reads (`orchestrator.memory.may_state_a_fact`).

The memory expert is a model call; most messages state no fact ("store selectively"), so
a cheap, pure test decides first. Measured on the seed scenarios (tests/data, copies of
the shared ones): at most one memory call per three user messages, and every message the
memory tests expect a fact from still reaches the expert.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from frontdesk.orchestrator.memory import may_state_a_fact

DATA = Path(__file__).resolve().parents[1] / "data"

# Every message the memory tests (test_memory.py, test_memory_wire.py) learn a fact from.
STATING = [
    "Hi! I prefer Hindi, if that's possible.",
    "By the way, I'm allergic to peanuts.",
    "I'm allergic to peanuts",
    "I live in Pune",
    "I've moved to Mumbai last month",
    "Please deliver in the evening",
    "Any peanut recipes? I prefer Hindi too",
    "Hello! I prefer Hindi.",
    "Hi, I\u2019m Priya and my son is vegan.",
]
SILENT = [
    "hello",
    "hello again",
    "What do you sell?",
    "Any recipe ideas?",
    "Can I pay with a gift card?",
    "Thanks, that is all",
    "Do you deliver on Sundays?",
]


@pytest.mark.parametrize("text", STATING)
def test_a_message_that_may_state_a_fact_goes_to_the_memory_expert(text: str) -> None:
    assert may_state_a_fact(text)


@pytest.mark.parametrize("text", SILENT)
def test_questions_and_greetings_do_not(text: str) -> None:
    assert not may_state_a_fact(text)


def test_at_most_one_memory_call_per_three_user_messages_on_the_seed_scenarios() -> None:
    said = [
        turn["user"]
        for path in sorted(DATA.glob("*.json"))
        for turn in json.loads(path.read_text())["turns"]
        if turn.get("user")
    ]
    learnt = [text for text in said if may_state_a_fact(text)]
    assert len(said) == 44
    assert len(learnt) * 3 <= len(said), learnt  # 5 of 44 today.
    assert any("I'm Priya" in text for text in learnt)  # Her name is a fact to keep.
