"""Loading an application (`--app mod:attr`) and the default database and models.

Public because two packages above the orchestrator use it alike: the CLI (`frontdesk.cli`)
and the HTTP service's worker factory (`frontdesk.service`).
"""

from __future__ import annotations

import importlib
import inspect
import os
from typing import Any

from frontdesk.errors import ConfigError
from frontdesk.masking import scrub
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.config import ModelChoice, default_model_choice

DEFAULT_APP = "frontdesk.examples.potato_shop:build"


def default_db() -> str:
    """`$FRONTDESK_DB`, else `sqlite:///frontdesk.db` in the working folder."""
    return os.environ.get("FRONTDESK_DB") or "sqlite:///frontdesk.db"


def describe_models(model: ModelChoice) -> str:
    """One line saying which models will answer, naming the offline stand-in plainly."""
    choice = default_model_choice() if model is None else model
    specs = choice if isinstance(choice, dict) else {"default": choice}
    names = {
        k: (v if isinstance(v, str) else getattr(v, "name", repr(v))) for k, v in specs.items()
    }
    if set(names.values()) == {"offline"} and model is not None:
        return "Using the offline stand-in model (deterministic, no network; not a language model)."
    if set(names.values()) == {"offline"}:
        return (
            "No ANTHROPIC_API_KEY or OPENAI_API_KEY set: using the offline stand-in model"
            " (deterministic, no network; not a language model)."
        )
    return "Models: " + ", ".join(f"{k}={scrub(v)}" for k, v in names.items())


def load_app(spec: str, *, model: ModelChoice = None, db: str | None = None) -> Orchestrator:
    """Import `module:attr`: an Orchestrator, or a function returning one.

    A function is called with `model=` and `store=` when it accepts them.

    Raises:
        ConfigError: the module or attribute is missing, or it is not an Orchestrator.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app {spec!r}: expected 'module:attribute', e.g. {DEFAULT_APP!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"--app {spec!r}: cannot import {module_name!r}: {e}") from e
    try:
        target = getattr(module, attr)
    except AttributeError as e:
        raise ConfigError(f"--app {spec!r}: {module_name} has no attribute {attr!r}") from e
    if isinstance(target, Orchestrator):
        target.app_spec = spec
        return target
    if not callable(target):
        raise ConfigError(f"--app {spec!r} is neither an Orchestrator nor a function")
    kwargs: dict[str, Any] = {}
    parameters = inspect.signature(target).parameters
    if "model" in parameters:
        kwargs["model"] = model
    if "store" in parameters and db is not None:
        kwargs["store"] = db
    app = target(**kwargs)
    if not isinstance(app, Orchestrator):
        raise ConfigError(f"--app {spec!r} returned {type(app).__name__}, not an Orchestrator")
    app.app_spec = spec  # Recorded with each turn, so `audit replay` can load it again.
    return app
