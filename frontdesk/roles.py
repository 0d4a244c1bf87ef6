"""The least-privilege PostgreSQL role an application runs frontdesk as.

Migrations run as the tables' owner (`frontdesk db upgrade`); the application itself
needs far less, and what it does not hold it cannot misuse: no TRUNCATE, no DDL (so no
dropping or disabling the audit triggers, which only an owner may do), no UPDATE or DELETE
on any audit table. It moves audit heads only through `audit_lock_head` and the
`audit_event_link` trigger (migration `0007_audit_guard`), which run as the owner.
`frontdesk db roles` prints or applies these grants.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine

from frontdesk.errors import ConfigError
from frontdesk.masking import MASK
from frontdesk.schema import VERSION_TABLE

__all__ = ["AUDIT_TABLES", "DEFAULT_ROLE", "apply_role", "role_statements"]

DEFAULT_ROLE = "frontdesk_app"
"""The role `frontdesk db roles` makes when none is named."""

AUDIT_TABLES = ("audit_event", "audit_head", "audit_prompt", "audit_blob")
"""Tables the application may read and (except heads) append to, never rewrite."""

_APPEND_ONLY = ("audit_event", "audit_prompt", "audit_blob")
_ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def role_statements(
    role: str, *, schema: str, tables: Sequence[str], password: str | None = None
) -> list[str]:
    """The SQL that creates (or resets) `role` with the application's privileges only.

    Args:
        role: The role name (lower case letters, digits and `_`).
        schema: The schema frontdesk's tables live in.
        tables: Every table of that schema (the conversation tables get plain DML).
        password: Set as the role's password when given.

    Raises:
        ConfigError: the role name is not a plain identifier.
    """
    if not _ROLE_NAME.match(role):
        raise ConfigError(
            f"role name {role!r} must be lower case letters, digits and '_' (at most 63),"
            f" e.g. {DEFAULT_ROLE!r}"
        )
    r, s = _quote(role), _quote(schema)
    literal = "'" + role.replace("'", "''") + "'"
    login = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
    if password is not None:
        login += " PASSWORD '" + password.replace("'", "''") + "'"

    def listed(names: Sequence[str]) -> str:
        return ", ".join(f"{s}.{_quote(n)}" for n in names)

    app_tables = [t for t in tables if t not in AUDIT_TABLES and t != VERSION_TABLE]
    statements = [
        f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {literal})"
        f" THEN CREATE ROLE {r}; END IF; END $$",
        f"ALTER ROLE {r} {login}",
        f"REVOKE ALL ON SCHEMA {s} FROM {r}",
        # Before PostgreSQL 15 every role may create tables in `public`: no DDL means none.
        f"REVOKE CREATE ON SCHEMA {s} FROM PUBLIC",
        f"GRANT USAGE ON SCHEMA {s} TO {r}",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM {r}",
        f"REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {s} FROM {r}",
    ]
    if app_tables:
        statements.append(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {listed(app_tables)} TO {r}")
    statements += [
        f"GRANT SELECT ON {listed([VERSION_TABLE])} TO {r}",
        f"GRANT SELECT, INSERT ON {listed(_APPEND_ONLY)} TO {r}",
        f"GRANT SELECT ON {listed(['audit_head'])} TO {r}",
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {s} TO {r}",
        f"GRANT EXECUTE ON FUNCTION {s}.audit_lock_head(varchar) TO {r}",
    ]
    return statements


def _schema_and_tables(conn: Connection) -> tuple[str, list[str]]:
    schema = conn.execute(text("SELECT current_schema()")).scalar_one()
    return schema, sorted(inspect(conn).get_table_names(schema=schema))


async def apply_role(
    engine: AsyncEngine, role: str, *, password: str | None = None, apply: bool
) -> list[str]:
    """Build the role's statements for the database of `engine` (and run them if `apply`).

    `engine` must connect as the tables' owner, on a database at the head schema. The
    statements come back with the password masked, for showing.

    Raises:
        ConfigError: the database is not PostgreSQL, or has no frontdesk audit tables.
    """
    if engine.dialect.name != "postgresql":
        raise ConfigError(
            "database roles are a PostgreSQL feature; SQLite has none (protect the file)"
        )
    async with engine.begin() as conn:
        schema, tables = await conn.run_sync(_schema_and_tables)
        if not set(AUDIT_TABLES) <= set(tables):
            raise ConfigError(
                f"schema {schema!r} has no frontdesk audit tables; run `frontdesk db upgrade` first"
            )
        if apply:
            for sql in role_statements(role, schema=schema, tables=tables, password=password):
                # Driver SQL: a password may hold a colon, which `text()` would take as a bind.
                await conn.exec_driver_sql(sql)
    shown = None if password is None else MASK
    return role_statements(role, schema=schema, tables=tables, password=shown)
