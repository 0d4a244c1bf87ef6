"""frontdesk: customer-service conversations run through a system of experts.

The public face. Everything is installed under this one namespace: `frontdesk.experts`,
`frontdesk.orchestrator`, `frontdesk.threads`, `frontdesk.audit`, `frontdesk.prompts` and
`frontdesk.examples`; errors are in `frontdesk.errors`, test doubles in `frontdesk.testing`.
"""

from frontdesk.logs import protect_logs

# Payload-carrying DEBUG records of the SDKs and the driver never reach the logs (see logs.py).
protect_logs()

from frontdesk.experts import Category, HandlerContext, NeedMoreInfo, Outcome  # noqa: E402
from frontdesk.memory import Memory  # noqa: E402
from frontdesk.orchestrator import Orchestrator, Reply, SyncOrchestrator  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Category",
    "HandlerContext",
    "Memory",
    "NeedMoreInfo",
    "Orchestrator",
    "Outcome",
    "Reply",
    "SyncOrchestrator",
    "__version__",
]
