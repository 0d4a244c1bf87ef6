"""The facts `frontdesk report` adds up, one conversation at a time, read in pages.

Conversations are read in pages of `PAGE` ids (keyset on the primary key, within the
period of their creation); each page's turns, ratings, hand-offs and failures are read by
the conversation indexes. Nothing holds more than one page, so a report over a large
store needs the memory of a page, on SQLite and PostgreSQL alike.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk._driver.tx import run_sync_tx
from frontdesk.threads.models import (
    Conversation,
    FeedbackRow,
    HandoffRow,
    Message,
    TurnOutcomeRow,
)

__all__ = ["PAGE", "ConversationFacts", "TurnCost", "conversation_facts", "count_in_period"]

PAGE = 500
"""Conversations read per page."""

_conv = Conversation.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]
_out = TurnOutcomeRow.__table__  # type: ignore[attr-defined]
_fb = FeedbackRow.__table__  # type: ignore[attr-defined]
_handoff = HandoffRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class TurnCost:
    """One expert's answer in a turn: its model and usage (what the audit recorded)."""

    model: str
    usage: dict[str, int]


@dataclass(slots=True)
class ConversationFacts:
    """What the report needs of one conversation."""

    id: str
    created_at: datetime
    resolution: str
    resolved_by: str | None
    category: str | None = None
    """The category of its first routed turn (`None`: no turn was routed)."""
    turns: int = 0
    """User messages, on every branch."""
    failed: int = 0
    """Turns whose failed-turn marker is still there (never answered)."""
    handed_off: bool = False
    waits: list[float] = field(default_factory=list)
    """Seconds from each hand-off to a person's first answer (or to its hand-back)."""
    ratings: list[int] = field(default_factory=list)
    comments: int = 0
    calls: list[TurnCost] = field(default_factory=list)
    variant: str | None = None
    """The prompt variant its replies were written with (`None`: no variants)."""


def _in_period(
    since: datetime | None, until: datetime | None, profile: str | None = None
) -> list[sa.ColumnElement[bool]]:
    where = [] if profile is None else [_conv.c.profile == profile]
    if since is not None:
        where.append(_conv.c.created_at >= since)
    if until is not None:
        where.append(_conv.c.created_at < until)
    return where


async def count_in_period(
    engine: AsyncEngine,
    since: datetime | None,
    until: datetime | None,
    profile: str | None = None,
) -> int:
    """How many conversations began in the period (for a progress bar)."""
    where = _in_period(since, until, profile)
    stmt = sa.select(sa.func.count()).select_from(_conv).where(*where)
    return await run_sync_tx(
        engine, lambda conn: int(conn.execute(stmt).scalar_one()), readonly=True
    )


async def conversation_facts(
    engine: AsyncEngine,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    profile: str | None = None,
    variants: bool = False,
    page: int = PAGE,
) -> AsyncIterator[list[ConversationFacts]]:
    """The facts of every conversation begun in [since, until) (of `profile`, when
    named), a page at a time (each page one read transaction); with `variants`, the
    variant of each (read from its replies' prompt versions)."""
    after = ""
    while True:
        work = functools.partial(
            _page,
            after=after,
            where=_in_period(since, until, profile),
            variants=variants,
            size=page,
        )
        facts = await run_sync_tx(engine, work, readonly=True)
        if not facts:
            return
        yield facts
        after = facts[-1].id


def _page(
    conn: Connection,
    *,
    after: str,
    where: list[sa.ColumnElement[bool]],
    variants: bool,
    size: int,
) -> list[ConversationFacts]:
    rows = conn.execute(
        sa.select(_conv.c.id, _conv.c.created_at, _conv.c.resolution, _conv.c.resolved_by)
        .where(_conv.c.id > after, *where)
        .order_by(_conv.c.id)
        .limit(size)
    ).all()
    facts = {r[0]: ConversationFacts(r[0], r[1], r[2], r[3]) for r in rows}
    if not facts:
        return []
    ids = list(facts)
    _messages(conn, ids, facts)
    _turns(conn, ids, facts)
    _ratings(conn, ids, facts)
    _handoffs(conn, ids, facts)
    if variants:
        _variants(conn, ids, facts)
    return list(facts.values())


def _messages(conn: Connection, ids: list[str], facts: dict[str, ConversationFacts]) -> None:
    user = sa.func.sum(sa.case((_msg.c.role == "user", 1), else_=0))
    failed = sa.func.sum(sa.case((_msg.c.kind == "failed", 1), else_=0))
    stmt = (
        sa.select(_msg.c.conversation_id, user, failed)
        .where(_msg.c.conversation_id.in_(ids))
        .group_by(_msg.c.conversation_id)
    )
    for cid, turns, fails in conn.execute(stmt):
        facts[cid].turns, facts[cid].failed = int(turns or 0), int(fails or 0)


def _turns(conn: Connection, ids: list[str], facts: dict[str, ConversationFacts]) -> None:
    """Each turn's category and usage, by the message index (the outcome's key is the
    user message's id), oldest first: the first routed turn names the category."""
    stmt = (
        sa.select(_msg.c.conversation_id, _out.c.category, _out.c.usage, _out.c.models)
        .select_from(_msg.join(_out, _out.c.user_message_id == _msg.c.id))
        .where(_msg.c.conversation_id.in_(ids), _msg.c.role == "user")
        .order_by(_msg.c.conversation_id, _msg.c.created_at)
    )
    for cid, category, usage, models in conn.execute(stmt):
        fact = facts[cid]
        if fact.category is None:
            fact.category = category
        for expert, used in (usage or {}).items():
            model = str((models or {}).get(expert, ""))
            fact.calls.append(TurnCost(model, {k: int(v) for k, v in used.items()}))


def _ratings(conn: Connection, ids: list[str], facts: dict[str, ConversationFacts]) -> None:
    stmt = sa.select(_fb.c.conversation_id, _fb.c.rating, _fb.c.comment).where(
        _fb.c.conversation_id.in_(ids)
    )
    for cid, rating, comment in conn.execute(stmt):
        facts[cid].ratings.append(int(rating))
        if comment:
            facts[cid].comments += 1


def _handoffs(conn: Connection, ids: list[str], facts: dict[str, ConversationFacts]) -> None:
    answer = _msg.alias("answer")
    first_answer = (
        sa.select(sa.func.min(answer.c.created_at))
        .where(
            answer.c.conversation_id == _handoff.c.conversation_id,
            answer.c.author.like("operator:%"),
            answer.c.created_at >= _handoff.c.opened_at,
        )
        .scalar_subquery()
    )
    stmt = sa.select(
        _handoff.c.conversation_id,
        _handoff.c.opened_at,
        _handoff.c.closed_at,
        first_answer.label("answered"),
    ).where(_handoff.c.conversation_id.in_(ids))
    dt = _handoff.c.opened_at.type
    for cid, opened, closed, answered in conn.execute(stmt):
        facts[cid].handed_off = True
        if isinstance(answered, str):  # A scalar subquery's result is untyped on SQLite.
            answered = dt.process_result_value(datetime.fromisoformat(answered), conn.dialect)
        end = answered if answered is not None else closed
        if end is not None:
            facts[cid].waits.append(max(0.0, (end - opened).total_seconds()))


def _variants(conn: Connection, ids: list[str], facts: dict[str, ConversationFacts]) -> None:
    stmt = sa.select(_msg.c.conversation_id, _msg.c.prompt_versions).where(
        _msg.c.conversation_id.in_(ids),
        _msg.c.role == "assistant",
        _msg.c.prompt_versions.is_not(None),
    )
    seen: dict[str, Any] = defaultdict(lambda: None)
    for cid, versions in conn.execute(stmt):
        if seen[cid] is None and isinstance(versions, dict) and versions.get("variant"):
            seen[cid] = facts[cid].variant = str(versions["variant"])
