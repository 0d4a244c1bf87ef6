"""The chatty customer scenario (examples/chatty_customer.json): every turn decides what
the scenario expects, on SQLite and PostgreSQL, and the thread stays pure."""

from __future__ import annotations

import pytest

from frontdesk.examples.chatty_customer import run, scenario

pytestmark = pytest.mark.anyio


async def test_the_chatty_customer_scenario(any_url: str) -> None:
    turns = scenario()["turns"]
    seen = await run(any_url, show=False)
    assert len(seen) == len(turns)
    for number, (turn, (reply, sent)) in enumerate(zip(turns, seen, strict=True), start=1):
        expect = turn["expect"]
        assert reply.category == expect["category"], number
        assert reply.pending == expect.get("pending", reply.pending), number
        assert reply.cancelled is bool(expect.get("cancelled", False)), number
        if "categories" in expect:
            assert reply.categories == expect["categories"], number
        if "language" in expect:
            assert reply.language == expect["language"], number
        experts = [r.expert for r in sent]
        if expect["how"] in ("resume", "pending", "cancel"):
            assert "triage" not in experts, number  # Routed without a triage call.
        for request in sent:  # The labelled context is in the last user turn only.
            earlier = [m["content"] for m in request.messages[:-1]]
            assert not any("<<request in progress" in m for m in earlier), number
