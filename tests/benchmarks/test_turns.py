"""The turn benchmark's PostgreSQL path runs and reports what docs/benchmarks.md shows."""

from __future__ import annotations

import pytest

from benchmarks.turns import WINDOWS, run_postgres, table
from tests._pg import PG_URL

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


async def test_the_postgres_turn_path_is_measured_in_a_database_of_its_own() -> None:
    figures = await run_postgres(PG_URL, turns=15, convs=3, per_conv=2)
    long, concurrent = figures["long"], figures["concurrent"]
    assert long["turns"] == 15 and long["t10_median_ms"] > 0
    assert long["db_mb"] > 0  # the size of the run's own database
    assert concurrent["turns_per_s"] > 0
    shown = table({"long": long, "concurrent": concurrent, "postgres": figures}, peers={})
    assert "**frontdesk** (PostgreSQL)" in shown and len(WINDOWS) == 3
