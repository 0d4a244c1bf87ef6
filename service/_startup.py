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
from dataclasses import dataclass

from frontdesk.audit.crypto import MASTER_KEY_ENV
from frontdesk.errors import ConfigError
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


def refuse_unsafe(orch: Orchestrator, startup: Startup) -> None:
    """Refuse what would fail open (see the module docstring), naming what to set.

    Raises:
        ConfigError: no master key without `--allow-clear-audit`; the offline stand-in
            chosen only because no key is set.
    """
    if not startup.allow_clear_audit and not orch.audit_encrypted:
        raise ConfigError(
            f"{MASTER_KEY_ENV} is not set, so the audit log would keep customers' messages in"
            f" clear: set {MASTER_KEY_ENV} to 32 random bytes in base64 ({MAKE_A_KEY}), or"
            " start with --allow-clear-audit to accept that"
        )
    if orch.offline_by_default:
        raise ConfigError(
            "no model named and neither ANTHROPIC_API_KEY nor OPENAI_API_KEY set, so every"
            " customer would get the offline stand-in's canned answers: set a key, or name"
            " the stand-in on purpose with --model offline"
        )


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
