"""`frontdesk db roles` on PostgreSQL: the application's role runs turns and cannot empty,
rewrite or unguard the audit log; nobody can TRUNCATE it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
from sqlalchemy.engine import make_url
from typer.testing import CliRunner

from frontdesk.cli import app
from frontdesk.examples.potato_shop import categories as potato_categories
from frontdesk.orchestrator import Orchestrator
from tests.orchestrator.conftest import FakeTeam

pytestmark = pytest.mark.postgres

runner = CliRunner()
PASSWORD = "app:pass-Word'1"


def _dsn(url: str, **parts: Any) -> str:
    return make_url(url).set(drivername="postgresql", **parts).render_as_string(hide_password=False)


async def _run(dsn: str, sql: str, *args: Any) -> Any:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()


@pytest.fixture
def app_role(fresh_pg_url: str) -> Iterator[tuple[str, str]]:
    """The database migrated by its owner, and the application role's name (dropped after)."""
    upgraded = runner.invoke(app, ["db", "upgrade", "--db", fresh_pg_url])
    assert upgraded.exit_code == 0, upgraded.output
    role = f"fd_app_{uuid.uuid4().hex[:10]}"
    try:
        yield fresh_pg_url, role
    finally:
        owner = _dsn(fresh_pg_url)
        if asyncio.run(_run(owner, "SELECT 1 FROM pg_roles WHERE rolname = $1", role)):
            asyncio.run(_run(owner, f"DROP OWNED BY {role}"))
            asyncio.run(_run(owner, f"DROP ROLE {role}"))


def test_roles_prints_the_grants_without_applying_them(app_role: tuple[str, str]) -> None:
    url, role = app_role
    result = runner.invoke(app, ["db", "roles", "--role", role, "--db", url])
    assert result.exit_code == 0, result.output
    grant = (
        f'GRANT SELECT, INSERT ON "public"."audit_event", "public"."audit_prompt",'
        f' "public"."audit_blob" TO "{role}";'
    )
    assert grant in result.output.splitlines()
    assert "TRUNCATE" not in result.output and "UPDATE" in result.output
    assert "audit_head" in result.output and "audit_lock_head" in result.output
    rows = asyncio.run(_run(_dsn(url), "SELECT 1 FROM pg_roles WHERE rolname = $1", role))
    assert rows == []  # printed only


def test_roles_refuses_sqlite(tmp_path: Any) -> None:
    result = runner.invoke(app, ["db", "roles", "--db", f"sqlite:///{tmp_path / 'f.db'}"])
    assert result.exit_code == 2 and "PostgreSQL" in result.output


FORBIDDEN = [
    "TRUNCATE audit_event",
    "TRUNCATE audit_head",
    "TRUNCATE message",
    "DROP TRIGGER audit_event_append_only ON audit_event",
    "DROP TRIGGER audit_event_no_truncate ON audit_event",
    "ALTER TABLE audit_event DISABLE TRIGGER USER",
    "ALTER TABLE audit_event DISABLE TRIGGER audit_event_link",
    "DROP TABLE audit_event",
    "CREATE TABLE scratch (i int)",
    "UPDATE audit_event SET kind = 'x'",
    "DELETE FROM audit_event",
    "UPDATE audit_head SET seq = 0",
    "DELETE FROM audit_head",
    "INSERT INTO audit_head (conversation_id, seq, hash) VALUES ('forged', 5, 'f')",
    "UPDATE audit_prompt SET text_json = '\"x\"'",
    "DELETE FROM audit_prompt",
    # A row that does not continue its chain is refused by the link trigger.
    "INSERT INTO audit_event (conversation_id, seq, event_id, kind, turn_id, created_at,"
    " payload_json, prompt_sha256, hash) VALUES ('c', 99, 'forged', 'reply', 't',"
    " '2026-01-01', '{}', NULL, 'y')",
]


async def _turns(url: str, team: FakeTeam) -> tuple[int, bool]:
    orch = Orchestrator(potato_categories(), model=team.model(), store=url)
    await orch.handle("c", "I'd like a bag of purple potatoes", user_id="u")
    await orch.handle("c", "Actually, two bags", user_id="u")
    await orch.memory.wait()  # The memory expert's rows, written after the replies.
    log = orch.audit_log
    assert log is not None
    rows = len(await log.events("c"))
    ok = (await log.verify()).ok
    await orch.aclose()
    return rows, ok


def test_the_app_role_runs_turns_but_cannot_empty_rewrite_or_unguard_the_audit(
    app_role: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, role = app_role
    monkeypatch.setenv("FD_APP_PASSWORD", PASSWORD)
    applied = runner.invoke(
        app,
        [
            "db",
            "roles",
            "--role",
            role,
            "--password-env",
            "FD_APP_PASSWORD",
            "--apply",
            "--db",
            url,
        ],
    )
    assert applied.exit_code == 0, applied.output
    assert PASSWORD not in applied.output and "PASSWORD '***'" in applied.output
    as_app = (
        make_url(url).set(username=role, password=PASSWORD).render_as_string(hide_password=False)
    )

    rows, ok = asyncio.run(_turns(as_app, FakeTeam()))
    assert rows > 0 and ok

    refused: dict[str, str] = {}
    for sql in FORBIDDEN:
        try:
            asyncio.run(_run(_dsn(as_app), sql))
        except asyncpg.PostgresError as e:
            refused[sql] = type(e).__name__
    assert refused == dict.fromkeys(FORBIDDEN[:-1], "InsufficientPrivilegeError") | {
        FORBIDDEN[-1]: "IntegrityConstraintViolationError"
    }

    # The owner may not TRUNCATE either: the statement trigger refuses it.
    owner = _dsn(url)
    with pytest.raises(asyncpg.PostgresError, match="TRUNCATE is refused"):
        asyncio.run(_run(owner, "TRUNCATE audit_event"))
    count = asyncio.run(_run(owner, "SELECT count(*) AS n FROM audit_event"))
    assert count[0]["n"] == rows
    verified = runner.invoke(app, ["audit", "verify", "--all", "--db", as_app])
    assert verified.exit_code == 0, verified.output
