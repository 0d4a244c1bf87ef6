"""frontdesk: customer-service conversations run through a system of experts.

The library lives in the top-level packages `experts`, `orchestrator`, `threads`, `audit`
and `prompts`; this package holds only what every one of them may import (the error base)
and the version.
"""

from frontdesk.errors import ConfigError, FrontdeskError, UserError
from frontdesk.logs import protect_logs

# Payload-carrying DEBUG records of the SDKs and the driver never reach the logs (see logs.py).
protect_logs()

__version__ = "0.1.0"

__all__ = ["ConfigError", "FrontdeskError", "UserError", "__version__"]
