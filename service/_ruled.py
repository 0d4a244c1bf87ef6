"""What the service's routes show of ruled request values (`Redact`, docs/privacy.md).

With `scrub_secrets` (the default) the stored messages and outcomes hold the shown forms
already, so the routes read nothing more. Without it, a route looks up the values kept for
the conversation's owner (one read) and shows every text and request through them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from frontdesk.orchestrator import Orchestrator

__all__ = ["Shown", "shown_for"]


class Shown:
    """Shows texts and JSON values as the rules say (`text`, `value`)."""

    def __init__(self, text: Callable[[str], str] | None = None,
                 value: Callable[[Any], Any] | None = None) -> None:  # fmt: skip
        self._text, self._value = text, value

    def text(self, text: str) -> str:
        return text if self._text is None else self._text(text)

    def value(self, value: Any) -> Any:
        return value if self._value is None else self._value(value)


async def shown_for(orch: Orchestrator, conversation_id: str) -> Shown:
    """How the routes of `conversation_id` show stored texts."""
    if orch.scrub_secrets:
        return Shown()
    values = await orch.privacy.ruled_values(conversation_id=conversation_id)
    return Shown(values.text, values.value) if values else Shown()
