"""Shared fixtures: no real provider is ever called from the suite, and the PostgreSQL databases.

PostgreSQL has one isolation scheme, a database of the test's own (tests/_pg.py):
`fresh_pg_url` per test, `session_pg_url` per session for tests that keep to their own
conversation ids, `pg_engine` an engine on a fresh one.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import HealthCheck, settings
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

import frontdesk.experts.providers.base as providers_base
from tests._pg import fresh_database

# Property tests judge what they check, never how fast the machine is: on a loaded 2-core
# runner, generating an input or running one example can take longer than Hypothesis's
# defaults allow (a `too_slow` health check failed a canonical-JSON test at load 11).
settings.register_profile("frontdesk", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("frontdesk")

# Keys from the developer's shell must never reach a test: a test that needs one sets it.
for _var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):
    os.environ.pop(_var, None)

providers_base.ALLOW_MODEL_REQUESTS = False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under `make test` (pytest-xdist, `--dist loadgroup`) the tests that start processes
    or build the package run one after another on one worker: two at once on a 2-core
    machine would starve each other's deadlines."""
    heavy = pytest.mark.xdist_group("processes")
    for item in items:
        if item.get_closest_marker("processes") or item.get_closest_marker("package"):
            item.add_marker(heavy)


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


@pytest.fixture
def fresh_pg_url() -> Iterator[str]:
    """An empty PostgreSQL database for this test alone (fails when PostgreSQL is down)."""
    with fresh_database() as url:
        yield url


@pytest.fixture(scope="session")
def session_pg_url() -> Iterator[str]:
    """A PostgreSQL database shared by the session's tests (each uses its own conversations)."""
    with fresh_database() as url:
        yield url


@pytest.fixture
async def pg_engine(fresh_pg_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on a fresh PostgreSQL database."""
    engine = create_async_engine(fresh_pg_url)
    try:
        yield engine
    finally:
        await engine.dispose()
