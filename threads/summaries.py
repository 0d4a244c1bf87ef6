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
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlmodel import Field, SQLModel

from threads._records import new_id
from threads._tx import run_tx
from threads.errors import StoreError
from threads.models import UTCDateTime, utcnow

__all__ = ["Summary", "SummaryRecord", "SummaryStore"]


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


_summary = Summary.__table__  # type: ignore[attr-defined]


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
        )


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

    async def add(
        self,
        *,
        conversation_id: str,
        covers_until_message_id: str,
        content: str,
        token_count: int,
        previous_summary_id: str | None = None,
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
        }

        async def insert(conn: AsyncConnection) -> SummaryRecord:
            await conn.execute(_summary.insert().values(**values))
            return SummaryRecord.from_row(values)

        try:
            return await run_tx(self.engine, insert), True
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
