"""The speculation benchmark runs on the seed scenarios and counts what it claims."""

from __future__ import annotations

import asyncio

from benchmarks.speculation import measure


def test_the_potato_order_keeps_every_guess_and_costs_nothing_extra() -> None:
    figures = asyncio.run(measure())
    potatoes = figures["potatoes"]
    # Four ORDERS turns: the first has nothing to guess, the other three guess right.
    assert (potatoes["guesses"], potatoes["kept"], potatoes["hit_rate_pct"]) == (3, 3, 100)
    assert potatoes["discarded_tokens"] == 0 and potatoes["tokens"] == potatoes["tokens_without"]
    priya = figures["priya-late-delivery"]
    assert 0 < priya["kept"] < priya["guesses"] < priya["turns"]
    assert priya["discarded_tokens"] > 0  # Wrong guesses are billed, and counted.
