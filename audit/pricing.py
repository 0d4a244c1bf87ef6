"""Model prices, for the cost reports: USD per million tokens, per model name.

The table states list prices as published by Anthropic and OpenAI (checked 2025-11); it
is a stated assumption, not a bill. Cache reads and writes are priced separately because
they differ from plain input by 10x (reads) and 1.25x (Anthropic's 5-minute writes).
OpenAI has no cache-write charge, so its cache writes cost the plain input price.
A model not in the table (including any `openai:NAME@BASE_URL` self-hosted server) costs 0
and is flagged `known=False`, so a report never hides that its total is incomplete.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Price:
    """USD per million tokens."""

    input: float
    output: float
    cache_read: float
    cache_write: float


PRICES: Mapping[str, Price] = {
    # Anthropic (cache write = 5-minute TTL).
    "anthropic:claude-opus-4-5": Price(5.00, 25.00, 0.50, 6.25),
    "anthropic:claude-opus-4-1": Price(15.00, 75.00, 1.50, 18.75),
    "anthropic:claude-opus-4": Price(15.00, 75.00, 1.50, 18.75),
    "anthropic:claude-sonnet-4-5": Price(3.00, 15.00, 0.30, 3.75),
    "anthropic:claude-sonnet-4": Price(3.00, 15.00, 0.30, 3.75),
    "anthropic:claude-3-7-sonnet": Price(3.00, 15.00, 0.30, 3.75),
    "anthropic:claude-haiku-4-5": Price(1.00, 5.00, 0.10, 1.25),
    "anthropic:claude-3-5-haiku": Price(0.80, 4.00, 0.08, 1.00),
    # OpenAI (cached input; no separate cache-write charge).
    "openai:gpt-5": Price(1.25, 10.00, 0.125, 1.25),
    "openai:gpt-5-mini": Price(0.25, 2.00, 0.025, 0.25),
    "openai:gpt-5-nano": Price(0.05, 0.40, 0.005, 0.05),
    "openai:gpt-4.1": Price(2.00, 8.00, 0.50, 2.00),
    "openai:gpt-4.1-mini": Price(0.40, 1.60, 0.10, 0.40),
    "openai:gpt-4.1-nano": Price(0.10, 0.40, 0.025, 0.10),
    "openai:gpt-4o": Price(2.50, 10.00, 1.25, 2.50),
    "openai:gpt-4o-mini": Price(0.15, 0.60, 0.075, 0.15),
    # The deterministic stand-in makes no provider call.
    "offline": Price(0.0, 0.0, 0.0, 0.0),
}
"""The price table, keyed by model spec; dated snapshots match their base name."""


@dataclass(frozen=True)
class Cost:
    """The cost of some tokens, and whether the model's price was known."""

    usd: float
    known: bool


def price_of(model: str, prices: Mapping[str, Price] = PRICES) -> Price | None:
    """The price of a model spec, or `None` when unknown.

    `anthropic:claude-sonnet-4-5-20250929` matches `anthropic:claude-sonnet-4-5` (the
    longest listed prefix followed by `-`); a spec with `@base_url` is self-hosted.
    """
    if "@" in model:
        return None
    if model in prices:
        return prices[model]
    matches = [name for name in prices if model.startswith(name + "-")]
    return prices[max(matches, key=len)] if matches else None


def cost_of(
    model: str,
    *,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    prices: Mapping[str, Price] = PRICES,
) -> Cost:
    """The USD cost of one call's usage; 0 and `known=False` for an unknown model."""
    price = price_of(model, prices)
    if price is None:
        return Cost(0.0, known=False)
    usd = (
        input_tokens * price.input
        + output_tokens * price.output
        + cache_read_tokens * price.cache_read
        + cache_write_tokens * price.cache_write
    ) / 1_000_000
    return Cost(usd, known=True)
