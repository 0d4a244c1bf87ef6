"""Stored summaries: each covers a path prefix of the transcript, up to one message.

A summary row names the last message it covers (`covers_until_message_id`). Because a
message has one path from the root, a summary covers exactly that path prefix, and every
branch whose path passes through that message shares it. A branch made by editing a
message INSIDE the prefix does not pass through the cut point, so it does not see the
summary and is compacted on its own (getting its own summary). The transcript is never
touched: a summary only changes what the experts are sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import Field, SQLModel

from frontdesk._driver import Statement
from frontdesk._driver.tx import run_sync_tx, run_tx
from frontdesk.errors import MessageNotFound, StoreError
from frontdesk.threads._records import MessageRecord, new_id
from frontdesk.threads.models import Message, UTCDateTime, utcnow

__all__ = [
    "PathSinceSummary",
    "Summary",
    "SummaryRecord",
    "SummaryStore",
    "path_since_newest_sync",
]


class Summary(SQLModel, table=True):
    """One rolling summary of a path prefix (table created by migration `0003_summaries`)."""

    __tablename__ = "summary"
    __table_args__ = (
        sa.UniqueConstraint(
            "conversation_id", "covers_until_message_id", name="uq_summary_covers_until"
        ),
    )

    id: str = Field(primary_key=True, max_length=36)
    conversation_id: str = Field(max_length=255, foreign_key="conversation.id")
    covers_until_message_id: str = Field(max_length=36, foreign_key="message.id")
    """The last message of the summarised path prefix: the cut point."""
    content: str = Field(sa_type=sa.Text)
    token_count: int = 0
    created_at: datetime = Field(sa_type=UTCDateTime)
    previous_summary_id: str | None = Field(default=None, max_length=36)
    """The summary this one rolled forward (it covers a shorter prefix of the same path)."""
    covered_messages: int | None = None
    """How many messages the covered path prefix holds (migration `0004`; `None` before)."""


_summary = Summary.__table__  # type: ignore[attr-defined]
_msg = Message.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True, kw_only=True, slots=True)
class SummaryRecord:
    """One stored summary."""

    id: str
    conversation_id: str
    covers_until_message_id: str
    content: str
    token_count: int
    created_at: datetime
    previous_summary_id: str | None
    covered_messages: int | None = None
    """How many messages the covered path prefix holds (`None`: written before it was kept)."""

    @classmethod
    def from_row(cls, row: Any) -> SummaryRecord:
        """Build a record from a `summary` row mapping."""
        return cls(
            id=row["id"],
            conversation_id=row["conversation_id"],
            covers_until_message_id=row["covers_until_message_id"],
            content=row["content"],
            token_count=row["token_count"],
            created_at=row["created_at"],
            previous_summary_id=row["previous_summary_id"],
            covered_messages=row.get("covered_messages"),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class PathSinceSummary:
    """A path read only as far back as its newest summary's cut point."""

    summary: SummaryRecord | None
    """The newest summary on the path (the one whose cut point is deepest), if any."""
    messages: list[MessageRecord]
    """The path after the cut point (the whole path when there is no summary), root first."""
    replaced: int
    """How many messages of the path the summary replaces (0 without one)."""


class SummaryStore:
    """Summaries in the conversation database (the engine of a `ConversationStore`)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def newest_on_path(
        self, conversation_id: str, path_ids: Sequence[str]
    ) -> SummaryRecord | None:
        """The summary whose cut point is deepest on this path (root-first ids), if any.

        The deepest cut is the newest compaction of this path; summaries made on other
        branches after the paths diverged are not on it.
        """
        if not path_ids:
            return None
        position = {message_id: index for index, message_id in enumerate(path_ids)}

        async def work(conn: AsyncConnection) -> list[SummaryRecord]:
            found: list[SummaryRecord] = []
            # Chunked so that a very long path never exceeds a driver's parameter limit.
            for start in range(0, len(path_ids), 500):
                chunk = list(path_ids[start : start + 500])
                stmt = sa.select(_summary).where(
                    _summary.c.conversation_id == conversation_id,
                    _summary.c.covers_until_message_id.in_(chunk),
                )
                found += [SummaryRecord.from_row(r) for r in (await conn.execute(stmt)).mappings()]
            return found

        rows = await run_tx(self.engine, work, readonly=True)
        if not rows:
            return None
        return max(rows, key=lambda s: (position[s.covers_until_message_id], s.created_at))

    async def path_since_newest(self, leaf_id: str) -> PathSinceSummary:
        """The newest summary on the path to `leaf_id` and the messages after its cut point.

        One recursive query that walks up from `leaf_id` and stops at the first message
        that is a summary's cut point (the deepest cut on this path is the newest
        compaction), so a long compacted conversation is never read back to its root.

        Raises:
            MessageNotFound: no message `leaf_id`.
        """

        # One hop to the reader (SQLite) or one read transaction: the async driver crosses
        # threads a dozen times for the same transaction (a compaction reads this twice).
        return await run_sync_tx(
            self.engine, lambda conn: path_since_newest_sync(conn, leaf_id), readonly=True
        )

    async def add(
        self,
        *,
        conversation_id: str,
        covers_until_message_id: str,
        content: str,
        token_count: int,
        previous_summary_id: str | None = None,
        covered_messages: int | None = None,
    ) -> tuple[SummaryRecord, bool]:
        """Store a summary in one transaction; returns it and whether it is new.

        A summary with the same cut point already stored (another process got there first)
        is returned instead, so a compaction is never applied twice.
        """
        values = {
            "id": new_id(),
            "conversation_id": conversation_id,
            "covers_until_message_id": covers_until_message_id,
            "content": content,
            "token_count": token_count,
            "created_at": utcnow(),
            "previous_summary_id": previous_summary_id,
            "covered_messages": covered_messages,
        }

        def insert(conn: Connection) -> SummaryRecord:
            conn.execute(_summary.insert().values(**values))
            return SummaryRecord.from_row(values)

        try:  # On SQLite, in the writer's transactions (one hop, not the async driver's).
            return await run_sync_tx(self.engine, insert), True
        except StoreError as e:
            # The unique cut point: another process stored this compaction first.
            if not isinstance(e.__cause__, IntegrityError):
                raise
        existing = await self._at(conversation_id, covers_until_message_id)
        if existing is None:
            raise RuntimeError("summary insert conflicted but no summary is stored")
        return existing, False

    async def for_conversation(self, conversation_id: str) -> list[SummaryRecord]:
        """Every summary of the conversation (all branches), oldest first."""

        async def work(conn: AsyncConnection) -> list[SummaryRecord]:
            stmt = (
                sa.select(_summary)
                .where(_summary.c.conversation_id == conversation_id)
                .order_by(_summary.c.created_at, _summary.c.id)
            )
            return [SummaryRecord.from_row(r) for r in (await conn.execute(stmt)).mappings()]

        result: list[SummaryRecord] = await run_tx(self.engine, work, readonly=True)
        return result

    async def _at(self, conversation_id: str, message_id: str) -> SummaryRecord | None:
        async def work(conn: AsyncConnection) -> SummaryRecord | None:
            stmt = sa.select(_summary).where(
                _summary.c.conversation_id == conversation_id,
                _summary.c.covers_until_message_id == message_id,
            )
            row = (await conn.execute(stmt)).mappings().first()
            return None if row is None else SummaryRecord.from_row(row)

        result: SummaryRecord | None = await run_tx(self.engine, work, readonly=True)
        return result


def path_since_newest_sync(conn: Connection, leaf_id: str) -> PathSinceSummary:
    """`SummaryStore.path_since_newest` inside the caller's transaction (a turn's first).

    Raises:
        MessageNotFound: no message `leaf_id`.
    """
    rows = _PATH_SINCE_SUMMARY.rows(conn, {"leaf_id": leaf_id})
    if not rows:
        raise MessageNotFound(f"no message {leaf_id!r}", message_id=leaf_id)
    top = rows[0]
    if top["summary_id"] is None:
        return PathSinceSummary(
            summary=None, messages=[MessageRecord.from_row(r) for r in rows], replaced=0
        )
    summary = SummaryRecord.from_row({name: top[label] for name, label in _SUMMARY_LABELS})
    replaced = summary.covered_messages
    if replaced is None:  # A summary written before the count was kept.
        replaced = _depth(conn, top["id"])
    return PathSinceSummary(
        summary=summary, messages=[MessageRecord.from_row(r) for r in rows[1:]], replaced=replaced
    )


def _covers(summary: Any, message: Any) -> sa.ColumnElement[bool]:
    return sa.and_(
        summary.c.conversation_id == message.c.conversation_id,
        summary.c.covers_until_message_id == message.c.id,
    )


def _path_since_summary() -> sa.Select[Any]:
    """Walk up from `:leaf_id`, stopping after the first message that is a cut point."""
    here = _summary.alias("here")
    walk = (
        sa.select(_msg.c.id, _msg.c.parent_id, sa.literal(0).label("depth"), here.c.id.label("cut"))
        .select_from(_msg.outerjoin(here, _covers(here, _msg)))
        .where(_msg.c.id == sa.bindparam("leaf_id"))
        .cte("walk", recursive=True)
    )
    up, there = _msg.alias("up"), _summary.alias("there")
    step = (
        sa.select(up.c.id, up.c.parent_id, walk.c.depth + 1, there.c.id)
        .select_from(
            walk.join(up, up.c.id == walk.c.parent_id).outerjoin(there, _covers(there, up))
        )
        .where(walk.c.cut.is_(None))
    )
    walk = walk.union_all(step)
    return (
        sa.select(_msg, *(c.label(f"summary_{c.name}") for c in _summary.c))
        .join(walk, _msg.c.id == walk.c.id)
        .outerjoin(_summary, _summary.c.id == walk.c.cut)
        .order_by(walk.c.depth.desc())
    )


# Built once: constructing (and cache-keying) the recursive query costs more than running it.
_PATH_SINCE_SUMMARY = Statement(_path_since_summary())
_SUMMARY_LABELS = [(c.name, f"summary_{c.name}") for c in _summary.c]


def _depth(conn: Connection, message_id: str) -> int:
    """How many messages the path from the root to `message_id` holds (it included)."""
    walk = sa.select(_msg.c.id, _msg.c.parent_id).where(_msg.c.id == message_id).cte(recursive=True)
    up = _msg.alias("up")
    walk = walk.union_all(
        sa.select(up.c.id, up.c.parent_id).join(walk, up.c.id == walk.c.parent_id)
    )
    return int(conn.execute(sa.select(sa.func.count()).select_from(walk)).scalar_one())
