"""The turn pipeline: thread -> triage -> request -> handler -> response -> thread/audit."""

from orchestrator._orchestrator import Orchestrator
from orchestrator.config import ExpertSettings
from orchestrator.errors import (
    EmptyMessage,
    ForbiddenCharacters,
    InputTooLarge,
    InvalidUserText,
    TurnFailed,
)
from orchestrator.reply import Reply
from orchestrator.sync import SyncOrchestrator

__all__ = [
    "EmptyMessage",
    "ExpertSettings",
    "ForbiddenCharacters",
    "InputTooLarge",
    "InvalidUserText",
    "Orchestrator",
    "Reply",
    "SyncOrchestrator",
    "TurnFailed",
]
