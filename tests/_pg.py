"""The suite's one way to use PostgreSQL: a database of its own, made from `FRONTDESK_TEST_PG_URL`.

Tests share the server with other runs and other engineers, so each gets a fresh database
with a random name (per test: `fresh_pg_url`; per session, for tests that isolate by
conversation id: `session_pg_url`; both in tests/conftest.py), dropped afterwards. When the
server is down they fail, never skip.

A plain module rather than a conftest, so that test modules, conftests and worker processes
import it without importing a conftest twice. `python -m tests._pg` checks the server is
reachable (the Makefile runs it before the suite).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sys
import uuid
from collections.abc import Iterator

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy.engine import make_url

PG_URL = os.environ.get(
    "FRONTDESK_TEST_PG_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


def _admin_dsn() -> str:
    return make_url(PG_URL).set(drivername="postgresql").render_as_string(hide_password=False)


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(_admin_dsn())
    try:
        # A test database need not survive a crash of the server; this makes CREATE DATABASE
        # about five times faster (it no longer waits for its WAL to reach the disk).
        await conn.execute("SET synchronous_commit = off")
        await conn.execute(sql)
    finally:
        await conn.close()


def _run_admin(sql: str) -> None:
    """Run `sql` on the server from any caller, also one inside an event loop (an async
    fixture asking for a sync one): asyncio.run on a thread of its own."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, _admin(sql)).result()


def create_database() -> str:
    """A fresh, empty database; returns its URL (asyncpg driver)."""
    name = f"fd_test_{uuid.uuid4().hex[:16]}"
    _run_admin(f'CREATE DATABASE "{name}"')
    return make_url(PG_URL).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    """Drop a database made by `create_database` (connections still open are ended)."""
    _run_admin(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')


async def terminate_backends(url: str) -> int:
    """End every server connection to the database of `url` (what a restart or a failover
    does to a pool); returns how many were ended."""
    conn = await asyncpg.connect(_admin_dsn())
    try:
        ended: int = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            make_url(url).database,
        )
    finally:
        await conn.close()
    return ended


class RoundTrips:
    """A TCP relay in front of the server that counts round trips: one each time a
    connection's client speaks after the server did (or first), whatever the driver, the
    statement or the transaction control it sends. Point a URL at it with `url`; count
    between `start` and `stop` (`count`)."""

    def __init__(self, target: str) -> None:
        parsed = make_url(target)
        self._upstream = (parsed.host or "127.0.0.1", parsed.port or 5432)
        self._target = parsed
        self._server: asyncio.Server | None = None
        self.on = False
        self.count = 0
        self.log: list[bytes] | None = None

    async def __aenter__(self) -> RoundTrips:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        """The target URL, through the relay."""
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        relayed = self._target.set(host="127.0.0.1", port=port)
        return relayed.render_as_string(hide_password=False)

    def start(self) -> None:
        self.count, self.on = 0, True

    def stop(self) -> int:
        self.on = False
        return self.count

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        last = ["server"]  # Who spoke last on this connection.

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, side: str) -> None:
            try:
                while data := await src.read(65536):
                    if side == "client" and last[0] == "server" and self.on:
                        self.count += 1
                        if self.log is not None:
                            self.log.append(data[:160])
                    last[0] = side
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pump(reader, up_writer, "client"), pump(up_reader, writer, "server"))


@contextlib.contextmanager
def fresh_database() -> Iterator[str]:
    """The URL of a fresh database for the duration of the block."""
    url = create_database()
    try:
        yield url
    finally:
        drop_database(url)


def main() -> int:
    """Say what to do when the server is not there, before a suite of failures does."""
    try:
        _run_admin("SELECT 1")
    except (OSError, asyncpg.PostgresError) as e:
        shown = make_url(PG_URL).render_as_string(hide_password=True)
        print(
            f"PostgreSQL at {shown} is not reachable ({e}).\n"
            "Start it (Debian: pg_ctlcluster --skip-systemctl-redirect <version> main start;"
            " .ci/run does this) or point FRONTDESK_TEST_PG_URL at a server where this user"
            " may create databases.",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
