"""Worker processes for the concurrent-append tests (spawned, so importable by name)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from frontdesk.audit.events import AuditEvent
from frontdesk.audit.store import AuditLog


async def _append_many(url: str, conversation_id: str, worker: int, count: int) -> None:
    log = await AuditLog.open(url)
    try:
        for i in range(count):
            event = AuditEvent(
                kind="turn_started",
                turn_id=f"w{worker}-{i}",
                payload={"worker": worker, "i": i},
                created_at=datetime.now(UTC),
            )
            await log.append(conversation_id, [event])
    finally:
        await log.aclose()


def append_many(url: str, conversation_id: str, worker: int, count: int) -> None:
    """Append `count` one-event batches to one conversation."""
    asyncio.run(_append_many(url, conversation_id, worker, count))
