"""`audit verify` fails when the store answered more turns than the log audits.

A log emptied wholesale, or cut back to a whole earlier turn together with its head, still
chains; only the conversation store shows that turns went missing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.db import create_engine
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.orchestrator import Orchestrator
from tests.orchestrator.conftest import FakeTeam

runner = CliRunner()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'frontdesk.db'}"
    fixture: str = request.getfixturevalue("fresh_pg_url")
    return fixture


async def _two_turns(url: str) -> None:
    orch = Orchestrator(potato_categories(), model=FakeTeam().model(), store=url)
    await orch.handle("c", "I'd like a bag of purple potatoes", user_id="u")
    await orch.handle("c", "Actually, two bags", user_id="u")
    await orch.aclose()


async def _as_attacker_with_ddl(url: str, *statements: str) -> None:
    """Run `statements` with every audit trigger out of the way (the tables' owner)."""
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            if conn.dialect.name == "sqlite":
                await conn.execute(text("DROP TRIGGER audit_event_no_delete"))
            else:
                await conn.execute(text("ALTER TABLE audit_event DISABLE TRIGGER USER"))
                await conn.execute(text("ALTER TABLE audit_head DISABLE TRIGGER USER"))
            for sql in statements:
                await conn.execute(text(sql))
    finally:
        await engine.dispose()


def _verify(url: str) -> tuple[int, str]:
    result = runner.invoke(app, ["audit", "verify", "--all", "--db", url], env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_an_intact_log_verifies(url: str) -> None:
    asyncio.run(_two_turns(url))
    code, out = _verify(url)
    assert code == 0, out
    assert "ok   c" in out


def test_an_emptied_log_fails_verify(url: str) -> None:
    asyncio.run(_two_turns(url))
    asyncio.run(_as_attacker_with_ddl(url, "DELETE FROM audit_event", "DELETE FROM audit_head"))
    code, out = _verify(url)
    assert code == 1, out
    assert "BAD  c" in out and "2 answered turns but the log has no rows" in out


def test_a_log_cut_back_to_its_first_turn_fails_verify(url: str) -> None:
    asyncio.run(_two_turns(url))
    # Cut the second turn's rows and move the head back: what is left chains perfectly.
    cut = (
        "DELETE FROM audit_event WHERE conversation_id = 'c' AND seq > (SELECT max(seq) FROM"
        " audit_event WHERE kind = 'reply' AND conversation_id = 'c' AND seq < (SELECT max(seq)"
        " FROM audit_event WHERE kind = 'reply' AND conversation_id = 'c'))"
    )
    head = (
        "UPDATE audit_head SET seq = (SELECT max(seq) FROM audit_event WHERE conversation_id ="
        " 'c'), hash = (SELECT hash FROM audit_event WHERE conversation_id = 'c' ORDER BY seq"
        " DESC LIMIT 1) WHERE conversation_id = 'c'"
    )
    asyncio.run(_as_attacker_with_ddl(url, cut, head))
    code, out = _verify(url)
    assert code == 1, out
    assert "2 answered turns but the log audits 1" in out
