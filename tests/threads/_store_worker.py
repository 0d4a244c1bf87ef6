"""A worker process for the cross-process store tests: `python _store_worker.py MODE ...`.

Modes:
    turns URL CONV TAG N     N turns, each: lock, user message, reply under it, release.
    append URL CONV TAG N    N user messages with no conversation lock (the store alone
                             must keep the chain linear).

When READY_FILE and GO_FILE are given (argv 6 and 7), the worker opens the store, creates
READY_FILE, and starts only once GO_FILE exists, so that the workers overlap.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from frontdesk.threads.store import ConversationStore


def _barrier(sync: list[str]) -> None:
    if sync:
        Path(sync[0]).touch()
        while not Path(sync[1]).exists():
            time.sleep(0.005)


async def _main(mode: str, url: str, conv: str, tag: str, count: int, sync: list[str]) -> None:
    store = await ConversationStore.open(url)
    try:
        # Blocking on purpose: nothing else runs in this worker until all start together.
        await asyncio.to_thread(_barrier, sync)
        for i in range(count):
            text = f"{tag}-{i}"
            if mode == "turns":
                async with store.conversation_lock(conv, timeout=120):
                    user, _ = await store.add_user_message(conv, text, client_message_id=text)
                    await store.add_assistant_message(user.id, f"reply to {text}")
            elif mode == "append":
                await store.add_user_message(conv, text, client_message_id=text)
            else:
                raise SystemExit(f"unknown mode {mode!r}")
    finally:
        await store.aclose()


if __name__ == "__main__":
    mode, url, conv, tag, count, *sync = sys.argv[1:]
    asyncio.run(_main(mode, url, conv, tag, int(count), sync))
