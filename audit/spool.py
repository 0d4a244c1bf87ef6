"""The local spool: batches the database refused, kept on disk until they can be written.

With `on_failure="spool"` an audit write failure never fails the turn and never loses an
event: the batch goes to `audit-spool.jsonl` (one batch per line, fsynced) and is written
first on the next successful append or `flush_spool()`. A file lock serialises processes
sharing the folder; each event's `event_id` makes re-sending a batch harmless.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from frontdesk.audit.chain import canonical_json
from frontdesk.audit.events import AuditEvent

BatchWriter = Callable[[str, Sequence[AuditEvent], str | None], Awaitable[None]]
"""Writes one batch: conversation id, events, the owner (`None`: single-user mode)."""


def event_to_dict(event: AuditEvent) -> dict[str, Any]:
    """An event as one JSON object (the spool and the JSONL export use this form)."""
    return {
        "event_id": event.event_id,
        "kind": event.kind,
        "turn_id": event.turn_id,
        "created_at": event.created_at.isoformat(),
        "payload": event.payload,
        "system_prompt": event.system_prompt,
    }


def event_from_dict(data: dict[str, Any]) -> AuditEvent:
    """The inverse of `event_to_dict`."""
    return AuditEvent(
        event_id=data["event_id"],
        kind=data["kind"],
        turn_id=data["turn_id"],
        created_at=datetime.fromisoformat(data["created_at"]),
        payload=data["payload"],
        system_prompt=data["system_prompt"],
    )


class Spool:
    """A JSONL file of unwritten batches in `directory`."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "audit-spool.jsonl"
        self._lock_path = directory / "audit-spool.lock"
        self._local = anyio.Lock()

    @contextlib.asynccontextmanager
    async def _locked(self) -> AsyncIterator[None]:
        """Hold the in-process lock and the cross-process file lock."""
        async with self._local:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                await anyio.to_thread.run_sync(fcntl.flock, fd, fcntl.LOCK_EX)
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)

    async def add(
        self, conversation_id: str, events: Sequence[AuditEvent], user_id: str | None = None
    ) -> None:
        """Append one batch durably (in clear: it is encrypted when it is written)."""
        line = canonical_json(
            {
                "conversation_id": conversation_id,
                "events": [event_to_dict(e) for e in events],
                "user_id": user_id,
            }
        )
        async with self._locked():
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())

    def pending(self) -> int:
        """How many batches wait in the spool."""
        if not self.path.exists():
            return 0
        with self.path.open(encoding="utf-8") as f:
            return sum(1 for line in f if line.strip())

    async def drain(self, write: BatchWriter) -> tuple[int, Exception | None]:
        """Write the spooled batches in order with `write`; keep those not yet written.

        Returns:
            The number of batches written and the error that stopped the drain, if any.
        """
        async with self._locked():
            if not self.path.exists():
                return 0, None
            lines = [ln for ln in self.path.read_text(encoding="utf-8").splitlines() if ln]
            written, error = 0, None
            for line in lines:
                batch = json.loads(line)
                try:
                    await write(
                        batch["conversation_id"],
                        [event_from_dict(e) for e in batch["events"]],
                        batch.get("user_id"),
                    )
                except Exception as e:  # The spool keeps the batch whatever went wrong.
                    error = e
                    break
                written += 1
            self._rewrite(lines[written:])
            return written, error

    def _rewrite(self, lines: list[str]) -> None:
        """Replace the spool with the remaining lines, atomically."""
        if not lines:
            self.path.unlink(missing_ok=True)
            return
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
