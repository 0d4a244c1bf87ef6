"""frontdesk: customer-service conversations run through a system of experts.

The public face. Everything is installed under this one namespace: `frontdesk.experts`,
`frontdesk.orchestrator`, `frontdesk.threads`, `frontdesk.audit`, `frontdesk.prompts` and
`frontdesk.examples`; errors are in `frontdesk.errors`, test doubles in `frontdesk.testing`.
"""

from frontdesk.logs import protect_logs

# Payload-carrying DEBUG records of the SDKs and the driver never reach the logs (see logs.py).
protect_logs()

from frontdesk.audit.crypto import KeyProvider  # noqa: E402
from frontdesk.errors import ProfileMismatch  # noqa: E402
from frontdesk.experts import Category, HandlerContext, NeedMoreInfo, Outcome  # noqa: E402
from frontdesk.experts.router import EmbeddingRouter  # noqa: E402
from frontdesk.experts.triage import Clarify  # noqa: E402
from frontdesk.knowledge import Passage  # noqa: E402
from frontdesk.memory import Memory  # noqa: E402
from frontdesk.memory_policy import MemoryPolicy  # noqa: E402
from frontdesk.orchestrator import (  # noqa: E402
    AuditSettings,
    CompactionPolicy,
    ErasureReport,
    Handoff,
    HandoffPolicy,
    JobSettings,
    Orchestrator,
    Profile,
    Reply,
    Screen,
    SpendLimit,
    SyncOrchestrator,
    Timeouts,
)
from frontdesk.redaction import Redact, RedactionPolicy, Redactor  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "AuditSettings",
    "Category",
    "Clarify",
    "CompactionPolicy",
    "EmbeddingRouter",
    "ErasureReport",
    "HandlerContext",
    "Handoff",
    "HandoffPolicy",
    "JobSettings",
    "KeyProvider",
    "Memory",
    "MemoryPolicy",
    "NeedMoreInfo",
    "Orchestrator",
    "Outcome",
    "Passage",
    "Profile",
    "ProfileMismatch",
    "Redact",
    "RedactionPolicy",
    "Redactor",
    "Reply",
    "Screen",
    "SpendLimit",
    "SyncOrchestrator",
    "Timeouts",
    "__version__",
]
