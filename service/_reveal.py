"""`?reveal=true` on the operator routes: a conversation's ruled values (`Redact`) in clear.

The stored messages and outcomes hold the shown forms (`[PIN]`, masked) with
`scrub_secrets`; the values themselves are only in the audit log (encrypted per user with
a master key). An operator whose token holds the `reveal` role (besides `operator`) may
ask a route for them, as `frontdesk audit show --reveal` does on the command line: the
route then shows each user message's text and request as the audit recorded them (its
`turn_started` and `request` events, decrypted), and the conversation's chain records who
was shown it (`revealed`, in clear, no content). Without the role the answer is 403;
without an audit log there is nothing to reveal from (and no record of it): 409.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException

from frontdesk.audit.events import AuditEvent
from frontdesk.orchestrator import Orchestrator
from frontdesk.service._auth import Principal

__all__ = ["Revealed", "revealed"]


@dataclass(frozen=True)
class Revealed:
    """The audit's record of each user message: its text and request as extracted."""

    texts: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, Any] = field(default_factory=dict)

    def text(self, message_id: str, shown: str) -> str:
        """The message's text as the customer wrote it (`shown` when the audit has none)."""
        return self.texts.get(message_id, shown)

    def request(self, message_id: str, shown: Any) -> Any:
        """The message's request as extracted (`shown` when the audit has none)."""
        return self.requests.get(message_id, shown)


async def revealed(
    orch: Orchestrator, principal: Principal, conversation_id: str, view: str
) -> Revealed:
    """The clear texts and requests of `conversation_id` for an operator who may see them,
    the showing recorded in its audit chain (`view`: the route).

    Raises:
        HTTPException: 403 without the `reveal` role; 409 without an audit log.
    """
    if not principal.is_revealer:
        raise HTTPException(status_code=403, detail="reveal=true needs the `reveal` role")
    log = orch.audit_log
    if log is None:
        raise HTTPException(
            status_code=409,
            detail="this deployment keeps no audit log: there is nothing to reveal from",
        )
    by = f"operator:{principal.user_id}"
    await log.append(
        conversation_id,
        [AuditEvent(kind="revealed", turn_id="revealed", payload={"view": view, "by": by})],
        in_clear=True,
    )
    texts: dict[str, str] = {}
    requests: dict[str, Any] = {}
    for event in await log.events(conversation_id):
        p = event.payload
        if event.kind == "turn_started" and isinstance(p.get("text"), str):
            # The first try's: a resumed turn starts from the message as scrubbed.
            texts.setdefault(str(p.get("user_message_id") or event.turn_id), p["text"])
        elif event.kind == "request" and p.get("request") is not None:
            requests[event.turn_id] = p["request"]
    return Revealed(texts=texts, requests=requests)
