"""Store URLs: plain forms map to the async drivers; anything else is a clear ConfigError."""

from __future__ import annotations

import pytest

from frontdesk.db import normalise_url
from frontdesk.errors import ConfigError, StoreUnavailable
from frontdesk.threads.store import ConversationStore


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///frontdesk.db", "sqlite+aiosqlite:///frontdesk.db"),
        ("sqlite+aiosqlite:////tmp/x.db", "sqlite+aiosqlite:////tmp/x.db"),
        ("postgresql://u:pw@db:5432/app", "postgresql+asyncpg://u:pw@db:5432/app"),
        ("postgres://u@db/app", "postgresql+asyncpg://u@db/app"),
        ("postgresql+asyncpg://u@db/app", "postgresql+asyncpg://u@db/app"),
    ],
)
def test_accepted_forms(given: str, expected: str) -> None:
    assert normalise_url(given) == expected


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u@db/app",
        "postgresql+psycopg2://u@db/app",
        "not a url",
        "sqlite://",
        "sqlite:///:memory:",
    ],
)
def test_other_forms_name_the_accepted_ones(url: str) -> None:
    with pytest.raises(ConfigError, match="sqlite"):
        normalise_url(url)


@pytest.mark.anyio
async def test_open_refuses_a_bad_url_with_config_error() -> None:
    with pytest.raises(ConfigError, match="postgresql"):
        await ConversationStore.open("mongodb://localhost/x")


@pytest.mark.anyio
async def test_an_unreachable_database_is_a_typed_error() -> None:
    with pytest.raises(StoreUnavailable, match="cannot reach") as caught:
        await ConversationStore.open("postgresql://nobody:secret@127.0.0.1:1/none")
    assert "secret" not in str(caught.value)
