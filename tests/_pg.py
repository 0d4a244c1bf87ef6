"""The PostgreSQL server the suite uses (`FRONTDESK_TEST_PG_URL`), in one place.

A plain module rather than a conftest, so that test modules and conftests import it
without importing a conftest twice.
"""

from __future__ import annotations

import os

PG_URL = os.environ.get(
    "FRONTDESK_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
