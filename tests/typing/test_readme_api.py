"""The README's tour runs as written."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.typing.readme_api import tour

pytestmark = pytest.mark.anyio


async def test_the_readme_tour_runs(tmp_path: Path) -> None:
    reply, edited, again = await tour(f"sqlite:///{tmp_path / 'f.db'}")
    assert reply.category == "ORDERS"
    assert reply.request is not None and reply.request.model_dump() == {
        "variety": "purple",
        "bags": 1,
    }
    assert edited.user_message_id != reply.user_message_id
    assert again.message_id != reply.message_id
    assert again.user_message_id == reply.user_message_id
