"""Several orchestrators opening (and so migrating) fresh databases at once in one process.

Alembic's `context` is process-global; `frontdesk.schema` runs one migration at a time per
process, so five opens at once all reach the head, ten rounds in a row, on both backends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from frontdesk.schema import current_revisions, head_revisions
from tests import _pg
from tests.service import _shop

pytestmark = pytest.mark.anyio

OPENS_AT_ONCE = 5
ROUNDS = 10


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def fresh_urls(backend: str, tmp_path: Path) -> Iterator[list[list[str]]]:
    """`ROUNDS` lists of `OPENS_AT_ONCE` empty databases each (one per orchestrator)."""
    if backend == "sqlite":
        yield [
            [f"sqlite:///{tmp_path / f'r{r}-o{o}.db'}" for o in range(OPENS_AT_ONCE)]
            for r in range(ROUNDS)
        ]
        return
    urls = [[_pg.create_database() for _ in range(OPENS_AT_ONCE)] for _ in range(ROUNDS)]
    try:
        yield urls
    finally:
        for round_urls in urls:
            for url in round_urls:
                _pg.drop_database(url)


async def test_five_orchestrators_open_fresh_databases_at_once(
    fresh_urls: list[list[str]],
) -> None:
    for round_urls in fresh_urls:
        orchestrators = [_shop.build(url) for url in round_urls]
        results = await asyncio.gather(*(o.open() for o in orchestrators), return_exceptions=True)
        try:
            failures = [r for r in results if isinstance(r, BaseException)]
            assert failures == []
            for orch in orchestrators:
                assert await current_revisions(orch.store.engine) == head_revisions()
        finally:
            await asyncio.gather(*(o.aclose() for o in orchestrators))


async def test_five_orchestrators_open_one_fresh_database_at_once(
    backend: str, tmp_path: Path
) -> None:
    """The same empty database, five openers: migrated once, every opener at the head."""
    for r in range(ROUNDS):
        url = (
            f"sqlite:///{tmp_path / f'shared-{r}.db'}"
            if backend == "sqlite"
            else _pg.create_database()
        )
        orchestrators = [_shop.build(url) for _ in range(OPENS_AT_ONCE)]
        try:
            results = await asyncio.gather(
                *(o.open() for o in orchestrators), return_exceptions=True
            )
            assert [r for r in results if isinstance(r, BaseException)] == []
            assert await current_revisions(orchestrators[0].store.engine) == head_revisions()
        finally:
            await asyncio.gather(*(o.aclose() for o in orchestrators))
            if backend != "sqlite":
                _pg.drop_database(url)
