"""What every `/v1` route depends on: the service's parts, the caller, the rate limit."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from frontdesk import metrics
from frontdesk.errors import ConversationNotFound, InvalidInput, InvalidToken
from frontdesk.orchestrator import Orchestrator
from frontdesk.service._admission import Admission, TurnGate
from frontdesk.service._auth import Principal, TokenVerifier
from frontdesk.service._limits import RateLimiter, retry_after_header
from frontdesk.threads import ConversationRecord


@dataclass
class Service:
    """The parts one app serves with (kept on `app.state.service`)."""

    orchestrator: Orchestrator
    verifier: TokenVerifier
    limiter: RateLimiter | None
    owns_orchestrator: bool
    allow_missing_idempotency_key: bool = False
    """Answer a message without `Idempotency-Key` (today 428: without a key a retry runs
    the handler again)."""
    allow_client_conversation_ids: bool = False
    """Let a first message create the conversation it names (today: only
    `POST /v1/conversations` makes ids, so none can be taken first or probed)."""
    admission: Admission = field(default_factory=Admission)
    """How many turns this worker runs at once (`service/_admission.py`)."""
    gate: TurnGate | None = None
    """The admission limit in force, made when the store is open (its pool sets the
    default)."""

    async def turn_gate(self) -> TurnGate:
        """The admission limit (made on first use when the app's startup did not)."""
        if self.gate is None:
            await self.orchestrator.open()
            if self.gate is None:
                engine = self.orchestrator.store.engine
                turns = self.admission.limit_for(engine)
                self.gate = TurnGate(turns, self.admission.queue_seconds)
        return self.gate


def service(request: Request) -> Service:
    found = request.app.state.service
    assert isinstance(found, Service)
    return found


def orchestrator(request: Request) -> Orchestrator:
    return service(request).orchestrator


_bearer = HTTPBearer(auto_error=False, description="A JWT: HS256 or RS256, with `exp` and `sub`.")


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The verified caller, after one token of their rate limit.

    Raises:
        InvalidToken: no bearer token, or one the verifier refuses (401).
        HTTPException: 429 with `Retry-After` when the caller's bucket is empty.
    """
    if credentials is None:
        raise InvalidToken("send `Authorization: Bearer <JWT>`")
    parts = service(request)
    principal = parts.verifier.verify(credentials.credentials)
    _check_path(request)
    if parts.limiter is not None:
        wait = await parts.limiter.acquire(principal.user_id)
        if wait > 0:
            metrics.rate_limited()
            raise HTTPException(
                status_code=429,
                detail="too many requests; retry after the number of seconds in Retry-After",
                headers={"Retry-After": retry_after_header(wait)},
            )
    return principal


def _check_path(request: Request) -> None:
    """Refuse ids in the path that no store can hold (NUL, a lone surrogate) with 422,
    before any query sees them (PostgreSQL would fail on them: a 500)."""
    for name, value in request.path_params.items():
        if isinstance(value, str) and _unstorable(value):
            raise InvalidInput(
                f"{name} holds a character no store can keep (NUL or a lone surrogate)"
            )


def _unstorable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return "\x00" in value


async def operator(principal: Annotated[Principal, Depends(caller)]) -> Principal:
    """The caller, who must hold the `operator` role (403 otherwise)."""
    if not principal.is_operator:
        raise HTTPException(status_code=403, detail="this route is for operators")
    return principal


async def privacy_officer(principal: Annotated[Principal, Depends(operator)]) -> Principal:
    """An operator who also holds the `privacy` role (403 otherwise): erasure."""
    if not principal.is_privacy:
        raise HTTPException(status_code=403, detail="erasing a user needs the `privacy` role")
    return principal


async def in_scope(
    orch: Orchestrator, principal: Principal, conversation_id: str
) -> ConversationRecord:
    """The conversation, if this operator's token covers its profile (and, handed off, its
    queue); else 404, as for a conversation that does not exist (no probing).

    Raises:
        ConversationNotFound: missing, or outside the token's `profiles`/`queues`.
    """
    conversation = await orch.store.conversation(conversation_id)
    scoped = principal.profiles is not None or principal.queues is not None
    if conversation is not None and scoped:
        current = None
        if principal.queues is not None:
            current = await orch.store.handoffs.current(conversation_id)
        reason = None if current is None else current.reason
        if not principal.sees(profile_of(orch, conversation.profile), reason):
            conversation = None
    if conversation is None:
        raise ConversationNotFound(
            f"no conversation {conversation_id!r}", conversation_id=conversation_id
        )
    return conversation


def profile_of(orch: Orchestrator, recorded: str | None) -> str:
    """A conversation's profile: the recorded one, else (from before profiles) the first."""
    return recorded if recorded is not None else next(iter(orch.profiles))


def customer_profile(orch: Orchestrator, principal: Principal) -> str | None:
    """The profile a customer's token names, checked against the deployment's.

    Raises:
        InvalidToken: a profile this deployment does not serve (401).
    """
    if principal.profile is not None and principal.profile not in orch.profiles:
        raise InvalidToken(f"the token's profile {principal.profile!r} is not served here")
    return principal.profile


def service_parts(request: Request) -> Service:
    return service(request)


Caller = Annotated[Principal, Depends(caller)]
Parts = Annotated[Service, Depends(service_parts)]
Operator = Annotated[Principal, Depends(operator)]
PrivacyOfficer = Annotated[Principal, Depends(privacy_officer)]
Orch = Annotated[Orchestrator, Depends(orchestrator)]
