"""Shared fixtures: no real provider is ever called from the suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import frontdesk.experts.providers.base as providers_base

# Keys from the developer's shell must never reach a test: a test that needs one sets it.
for _var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
    os.environ.pop(_var, None)

providers_base.ALLOW_MODEL_REQUESTS = False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def allow_model_requests() -> Iterator[None]:
    """Allow real adapters to run, for tests that point an SDK at a local wire server."""
    providers_base.ALLOW_MODEL_REQUESTS = True
    try:
        yield
    finally:
        providers_base.ALLOW_MODEL_REQUESTS = False
