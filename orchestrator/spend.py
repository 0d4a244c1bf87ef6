"""Spend limits: tokens and estimated cost per user (or conversation) over a window.

`Orchestrator(spend_limit=SpendLimit(tokens=..., cost_usd=..., per="user", window="1d"))`
adds up the usage every stored turn already records (`turn_outcome.usage`, read from the
database: every process and worker counts the same spend), and that of the background
calls the turns led to (the summariser's compactions and the memory expert's learning,
kept by `used` in `model_spend`), before a turn's first model call; at or over the limit
the turn raises `SpendLimitReached` and no model is called. The message stays stored,
with the failed turn's safe reply under it.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Literal

from frontdesk.audit.pricing import cost_of
from frontdesk.errors import ConfigError, SpendLimitReached
from frontdesk.orchestrator._recorder import TurnRecorder
from frontdesk.threads.models import utcnow
from frontdesk.threads.spend import Spent
from frontdesk.threads.store import ConversationStore

_WINDOW = re.compile(r"^\s*(\d+)\s*([smhd])\s*$")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def window_of(value: dt.timedelta | str) -> dt.timedelta:
    """`"1d"`, `"12h"`, `"30m"`, `"90s"` or a `timedelta`, as a positive `timedelta`."""
    if isinstance(value, str):
        match = _WINDOW.match(value)
        if match is None:
            raise ConfigError(
                f"SpendLimit window {value!r}: use a number and a unit (s, m, h, d), e.g. '1d'"
            )
        value = dt.timedelta(**{_UNIT[match[2]]: int(match[1])})
    if not isinstance(value, dt.timedelta) or value <= dt.timedelta(0):
        raise ConfigError(f"SpendLimit window must be positive, got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class SpendLimit:
    """At most `tokens` (input and output, every expert) and/or `cost_usd` (list prices,
    `audit/pricing.py`; a model it does not list counts 0) per user or per conversation
    over a sliding `window`. A turn without a user id counts per conversation."""

    tokens: int | None = None
    cost_usd: float | None = None
    per: Literal["user", "conversation"] = "user"
    window: dt.timedelta | str = "1d"

    def __post_init__(self) -> None:
        if self.tokens is None and self.cost_usd is None:
            raise ConfigError("SpendLimit needs tokens= or cost_usd= (or both)")
        if self.tokens is not None and (isinstance(self.tokens, bool) or self.tokens <= 0):
            raise ConfigError(f"SpendLimit tokens must be a positive int, got {self.tokens!r}")
        if self.cost_usd is not None and not self.cost_usd > 0:
            raise ConfigError(f"SpendLimit cost_usd must be positive, got {self.cost_usd!r}")
        if self.per not in ("user", "conversation"):
            raise ConfigError(f"SpendLimit per must be 'user' or 'conversation', not {self.per!r}")
        object.__setattr__(self, "window", window_of(self.window))

    @property
    def span(self) -> dt.timedelta:
        """The window as a `timedelta`."""
        assert isinstance(self.window, dt.timedelta)
        return self.window


def used(recorder: TurnRecorder) -> tuple[dict[str, dict[str, int]], dict[str, str]]:
    """The usage of the model attempts `recorder` saw (what the audit records of them,
    retries and failed answers included), per expert, and the model of each: what a
    background call keeps for the spend limits (empty when no attempt was made)."""
    usage: dict[str, dict[str, int]] = {}
    models: dict[str, str] = {}
    for event in recorder.events:
        if event.kind != "model_attempt":
            continue
        expert = str(event.payload.get("expert") or "")
        total = usage.setdefault(expert, {})
        for name, count in (event.payload.get("usage") or {}).items():
            if isinstance(count, int):
                total[name] = total.get(name, 0) + count
        models[expert] = str(event.payload.get("model") or "")
    return usage, models


def _tokens(spent: Spent) -> int:
    return sum(
        u.get("input_tokens", 0)
        + u.get("cache_read_tokens", 0)
        + u.get("cache_write_tokens", 0)
        + u.get("output_tokens", 0)
        for u in spent.usage.values()
    )


def _usd(spent: Spent) -> float:
    return sum(
        cost_of(
            spent.models.get(expert, ""),
            input_tokens=u.get("input_tokens", 0),
            output_tokens=u.get("output_tokens", 0),
            cache_read_tokens=u.get("cache_read_tokens", 0),
            cache_write_tokens=u.get("cache_write_tokens", 0),
        ).usd
        for expert, u in spent.usage.items()
    )


async def check(
    limit: SpendLimit,
    store: ConversationStore,
    recorder: TurnRecorder,
    *,
    user_id: str | None,
    conversation_id: str,
) -> None:
    """Raise `SpendLimitReached` when the spend in the window is at or over `limit`.

    Raises:
        SpendLimitReached: with the seconds until the oldest counted spend leaves it.
    """
    now = utcnow()
    by_user = limit.per == "user" and user_id is not None
    rows = await store.spent_since(
        now - limit.span,
        user_id=user_id if by_user else None,
        conversation_id=None if by_user else conversation_id,
    )
    tokens = sum(_tokens(r) for r in rows)
    usd = sum(_usd(r) for r in rows) if limit.cost_usd is not None else 0.0
    over = (limit.tokens is not None and tokens >= limit.tokens) or (
        limit.cost_usd is not None and usd >= limit.cost_usd
    )
    if not over:
        return
    oldest = rows[0].at if rows[0].at.tzinfo else rows[0].at.replace(tzinfo=dt.UTC)
    retry_after = max(1.0, (oldest + limit.span - now).total_seconds())
    recorder.note(
        "spend_limit", tokens=tokens, cost_usd=round(usd, 6), per=limit.per, retry_after=retry_after
    )
    who = f"user {user_id!r}" if by_user else f"conversation {conversation_id!r}"
    raise SpendLimitReached(
        f"{who} spent {tokens} tokens (${usd:.4f}) in the last {limit.span}, at or over its"
        f" spend limit; try again in {retry_after:.0f} s",
        retry_after=retry_after,
        tokens=tokens,
        cost_usd=usd,
        user_id=user_id,
        conversation_id=conversation_id,
    )
