"""The root of every frontdesk error, in a leaf module that every package may import.

    FrontdeskError                  anything frontdesk raises on purpose
    ├── UserError                   the caller did something to fix (bad input, bad config)
    │   └── ConfigError             bad configuration: names the setting and what to do
    └── (run failures live in each package's errors.py: experts, threads, audit, orchestrator)

It is factored out of the packages so that `threads` and `audit`, which import neither
`experts` nor `orchestrator`, share one base with them.
"""

from __future__ import annotations


class FrontdeskError(Exception):
    """Base class of every error frontdesk raises on purpose."""


class UserError(FrontdeskError):
    """A mistake by the caller; the message says what to change."""


class ConfigError(UserError):
    """Configuration that cannot work (unknown model spec, missing key, bad budget, ...)."""
