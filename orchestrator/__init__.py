"""The turn pipeline: thread -> triage -> request -> handler -> response -> thread/audit."""

from frontdesk.errors import (
    EmptyMessage,
    ForbiddenCharacters,
    InputTooLarge,
    InvalidUserText,
    TurnFailed,
)
from frontdesk.orchestrator._orchestrator import Orchestrator
from frontdesk.orchestrator.config import ExpertSettings
from frontdesk.orchestrator.erasure import ErasureReport, RetentionPolicy
from frontdesk.orchestrator.handoff import Claim, Handoff
from frontdesk.orchestrator.profile import (
    AuditSettings,
    CompactionPolicy,
    HandoffPolicy,
    JobSettings,
    Profile,
    Timeouts,
)
from frontdesk.orchestrator.reply import Reply
from frontdesk.orchestrator.screen import HeuristicScreen, Screen, ScreenContext
from frontdesk.orchestrator.spend import SpendLimit
from frontdesk.orchestrator.stream import TurnEvent
from frontdesk.orchestrator.sync import SyncOrchestrator

__all__ = [
    "AuditSettings",
    "Claim",
    "CompactionPolicy",
    "EmptyMessage",
    "ErasureReport",
    "ExpertSettings",
    "ForbiddenCharacters",
    "Handoff",
    "HandoffPolicy",
    "HeuristicScreen",
    "InputTooLarge",
    "InvalidUserText",
    "JobSettings",
    "Orchestrator",
    "Profile",
    "Reply",
    "RetentionPolicy",
    "Screen",
    "ScreenContext",
    "SpendLimit",
    "SyncOrchestrator",
    "Timeouts",
    "TurnEvent",
    "TurnFailed",
]
