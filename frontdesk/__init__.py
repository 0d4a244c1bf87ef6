"""frontdesk: customer-service conversations run through a system of experts.

The library lives in the top-level packages `experts`, `orchestrator`, `threads`, `audit`
and `prompts`; this package holds only what every one of them may import (the error base)
and the version.
"""

from frontdesk.errors import ConfigError, FrontdeskError, UserError

__version__ = "0.1.0"

__all__ = ["ConfigError", "FrontdeskError", "UserError", "__version__"]
