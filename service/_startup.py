"""`frontdesk serve` fails closed: what it refuses to start with, and what it says it runs.

Two defaults would fail open, silently, in production:
- no `FRONTDESK_MASTER_KEY`: the audit log keeps every customer's messages in clear, and
  erasing a user leaves them readable there;
- no model named and no provider key: every customer is answered by the offline
  stand-in's canned text.

So `serve` refuses both unless told: `--allow-clear-audit` (which `--demo-tokens`, a
development switch, implies) and `--model offline` (or an app that names its models). When
it starts, it prints one line each for the models per expert, the store (its password
masked), the audit encryption, the job mode and the worker count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from frontdesk.audit.crypto import MASTER_KEY_ENV
from frontdesk.errors import ConfigError, ConfigProblems, FrontdeskError, StoreError, UserError
from frontdesk.masking import mask_url, scrub
from frontdesk.orchestrator import Orchestrator

MAKE_A_KEY = "python -c 'import base64, os; print(base64.b64encode(os.urandom(32)).decode())'"


@dataclass(frozen=True, kw_only=True)
class Startup:
    """What `serve` was told, for its checks and its start-up lines."""

    db: str
    workers: int
    allow_clear_audit: bool
    job_mode: str = "inline (each worker runs the jobs of its own turns, after the reply)"


STORE_HINT = "check --db or $FRONTDESK_DB: the server must be up, the file a frontdesk database"


@dataclass
class Problems:
    """What a configuration check found wrong, so that one run names every problem (not one
    per restart); each is one line with its fix."""

    found: list[FrontdeskError] = field(default_factory=list)

    @contextmanager
    def check(self) -> Iterator[None]:
        """Run a check; a configuration or store error it raises is kept, not raised."""
        try:
            yield
        except ConfigProblems as e:
            self.found.extend(ConfigError(line) for line in e.problems)
        except (UserError, StoreError) as e:
            self.found.append(e)

    def add(self, line: str) -> None:
        """Keep a problem found without an exception."""
        self.found.append(ConfigError(line))

    def raise_found(self) -> None:
        """Raise what was found: the error itself when one, `ConfigProblems` when several.

        Raises:
            FrontdeskError: the one problem found.
            ConfigProblems: several, one line each.
        """
        if len(self.found) == 1:
            raise self.found[0]
        if self.found:
            raise ConfigProblems([line(e) for e in self.found])


def line(error: FrontdeskError) -> str:
    """One problem as one line: a store error gets the hint its message lacks."""
    text = " ".join(str(error).split())
    return f"{text} ({STORE_HINT})" if isinstance(error, StoreError) else text


def unsafe(orch: Orchestrator, startup: Startup) -> list[str]:
    """What would fail open (see the module docstring), each as one line naming what to set."""
    found = []
    if not startup.allow_clear_audit and not orch.audit_encrypted:
        found.append(NO_MASTER_KEY)
    if orch.offline_by_default:
        found.append(
            "no model named and neither ANTHROPIC_API_KEY nor OPENAI_API_KEY set, so every"
            " customer would get the offline stand-in's canned answers: set a key, or name"
            " the stand-in on purpose with --model offline"
        )
    return found


NO_MASTER_KEY = (
    f"{MASTER_KEY_ENV} is not set, so the audit log would keep customers' messages in"
    f" clear: set {MASTER_KEY_ENV} to 32 random bytes in base64 ({MAKE_A_KEY}), or"
    " start with --allow-clear-audit to accept that"
)


def refuse_unsafe(orch: Orchestrator, startup: Startup) -> None:
    """Refuse what would fail open (see the module docstring), naming what to set.

    Raises:
        ConfigError: no master key without `--allow-clear-audit`; the offline stand-in
            chosen only because no key is set (`ConfigProblems` when both).
    """
    found = unsafe(orch, startup)
    if len(found) == 1:
        raise ConfigError(found[0])
    if found:
        raise ConfigProblems(found)


def describe(orch: Orchestrator, startup: Startup) -> list[str]:
    """The start-up lines: models, store, audit encryption, job mode, workers (no secrets)."""
    models = ", ".join(f"{expert}={scrub(model.name)}" for expert, model in orch.models.items())
    if orch.audit_encrypted:
        audit = "audit: payloads encrypted per user (master key set)"
    elif orch.audit_enabled:
        audit = f"audit: payloads IN CLEAR ({MASTER_KEY_ENV} not set; --allow-clear-audit)"
    else:
        audit = "audit: off (this app keeps no audit log)"
    retention, worker = orch.retention, orch.jobs_mode == "worker"
    return [
        f"models: {models}",
        f"store: {mask_url(startup.db)}",
        audit,
        f"jobs: {startup.job_mode}",
        *(
            []
            if retention is None
            else [
                f"retention: payloads older than {retention.older_than.days} days shredded"
                f" every {retention.every} s (job privacy.retention"
                f"{', transcripts too' if retention.transcripts else ''}"
                f"{'; run by the workers: give frontdesk worker --retention' if worker else ''})"
            ]
        ),
        f"workers: {startup.workers} (pid {os.getpid()} supervises)"
        if startup.workers > 1
        else "workers: 1",
    ]
