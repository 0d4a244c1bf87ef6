"""Erasure markers that reveal nothing (issue 21): what outlives a user names them by a keyed
digest, and nothing stored holds the plain digest of their id, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from frontdesk.audit import compact
from frontdesk.audit import store as audit_store
from frontdesk.audit.chains import legacy_user_chain_id, user_chain_id
from frontdesk.audit.refs import UNKEYED, UserRefs
from frontdesk.audit.store import AuditLog
from frontdesk.db import create_engine, dispose_engine, run_write
from frontdesk.experts.providers import FunctionModel, ModelRequest
from frontdesk.jobs.store import JobSpec, defer, list_jobs, rename_lock
from frontdesk.orchestrator import Orchestrator
from frontdesk.orchestrator.erasure import apply_retention, erased_owner
from frontdesk.schema import ensure_schema
from tests.privacy import _app
from tests.privacy.test_privacy import new_key, verify_all

pytestmark = pytest.mark.anyio

ALICE = "cust-00424242"  # An id from a small space: the finding recovered one in 6 s.
CAROL = "cust-00171717"
STATES_A_FACT = "I live in Pune, account " + _app.ACCOUNT


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'frontdesk.db'}"
        return
    yield str(request.getfixturevalue("fresh_pg_url"))


def plain(user_id: str) -> str:
    """The unkeyed digest the finding inverted (erased owner, chain id and key ref alike)."""
    return hashlib.sha256(user_id.encode()).hexdigest()[:32]


def answer(request: ModelRequest) -> Any:
    if request.expert == "memory":
        return {"facts": [{"text": "Lives in Pune", "key": "home_city"}]}
    return _app._answer(request)


def orchestrator(url: str, key: str | None) -> Orchestrator:
    return Orchestrator(_app.categories(), model=FunctionModel(answer), store=url, audit_key=key)


def stored_bytes(url: str) -> bytes:
    """Every byte the database keeps: the SQLite file and its WAL, or a `pg_dump`."""
    parsed = make_url(url)
    if parsed.drivername.startswith("sqlite"):
        assert parsed.database is not None
        paths = [Path(parsed.database), Path(parsed.database + "-wal")]
        return b"".join(p.read_bytes() for p in paths if p.exists())
    dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
    return subprocess.run(["pg_dump", dsn], capture_output=True, check=True).stdout


def _as_text(value: object) -> str:
    """A column's value as text; the audit's deflated texts (audit.compact) inflated, so a
    digest inside a compressed payload is found too."""
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        try:
            return compact.inflate_bytes(data).decode("utf-8", "replace")
        except ValueError:
            return data.decode("latin-1")
    return str(value)


async def table_hits(url: str, needles: list[str]) -> dict[str, int]:
    """Per table (every table of the database, Procrastinate's too), how many times its rows
    as text hold any of `needles`; tables with none are left out."""
    engine = create_engine(url)
    hits: dict[str, int] = {}
    try:
        async with engine.connect() as conn:
            if engine.dialect.name == "postgresql":
                names = "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            else:
                names = "SELECT name FROM sqlite_master WHERE type = 'table'"
            for name in list((await conn.execute(text(names))).scalars()):
                quoted = '"' + name.replace('"', '""') + '"'
                result = await conn.execute(text(f"SELECT * FROM {quoted}"))
                rows = [" ".join(_as_text(v) for v in r) for r in result]
                count = sum(row.count(n) for row in rows for n in needles)
                if count:
                    hits[name] = count
    finally:
        await dispose_engine(engine)
    return hits


async def owners(url: str) -> dict[str, str]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.execute(text("SELECT id, user_id FROM conversation ORDER BY id"))
            return {r[0]: r[1] for r in rows}
    finally:
        await dispose_engine(engine)


async def refs_of(url: str, key: str) -> UserRefs:
    async with await AuditLog.open(url, master_key=key) as log:
        return log.refs


async def test_after_erasure_neither_the_id_nor_its_plain_digest_is_stored_anywhere(
    url: str,
) -> None:
    key = new_key()
    orch = orchestrator(url, key)
    await orch.handle("alice-0", STATES_A_FACT, user_id=ALICE)  # A memory job, its lock.
    await orch.handle("alice-1", _app.ZOE_TEXT, user_id=ALICE)
    await orch.handle("bob-0", _app.BOB_TEXT, user_id=_app.BOB)
    await orch.drain()
    fact = await orch.remember(ALICE, "Prefers Tamil", key="language")  # Her own chain.
    await orch.forget(ALICE, fact.id)
    assert [m.text for m in await orch.memories(ALICE)] == ["Lives in Pune"]
    assert orch.audit_log is not None
    refs = orch.audit_log.refs
    # Nothing is filed under the plain digest, even before the erasure (a 16-digit prefix
    # would find the job lock's 24 digits too).
    needles = [plain(ALICE)[:16]]
    assert await table_hits(url, needles) == {}
    assert stored_bytes(url).count(ALICE.encode()) > 0  # The store holds her id till now.

    report = await orch.erase_user(ALICE)
    again = await orch.erase_user(ALICE)
    await orch.aclose()

    assert report.conversations == 2 and report.audit_keys == 1 and report.memories >= 1
    assert set(again.counts().values()) == {0}  # Idempotent.
    marker = erased_owner(ALICE, refs)
    assert marker.startswith("erased:") and marker != "erased:" + plain(ALICE)
    assert (await owners(url))["alice-0"] == marker == (await owners(url))["alice-1"]
    data = stored_bytes(url)
    assert data.count(plain(ALICE)[:16].encode()) == 0
    assert data.count(ALICE.encode()) == 0
    assert await table_hits(url, [*needles, ALICE]) == {}
    assert data.count(marker.encode()) >= 2  # What is there is the keyed marker...
    assert data.count(user_chain_id(ALICE, refs).encode()) >= 1  # ...and the keyed chain.
    async with await AuditLog.open(url, master_key=key) as log:
        chain = [e.kind for e in await log.events(user_chain_id(ALICE, refs))]
    assert chain == ["memory_written", "memory_forgotten", "erased", "erased"]  # Each run.
    assert await verify_all(url)


async def test_a_marker_depends_on_the_databases_key_and_is_plain_only_without_one(
    tmp_path: Path,
) -> None:
    first, second = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    key_a, key_b = new_key(), new_key()
    refs_a, refs_b = await refs_of(first, key_a), await refs_of(second, key_b)
    assert refs_a.keyed and refs_b.keyed
    assert erased_owner(ALICE, refs_a) != erased_owner(ALICE, refs_b)
    assert erased_owner(ALICE, refs_a) == erased_owner(ALICE, await refs_of(first, key_a))
    # One subkey per purpose: her digests in different tables do not match each other.
    assert len({refs_a.ref(p, ALICE) for p in ("data_key", "user_chain", "erased_owner")}) == 3
    assert erased_owner(ALICE, refs_a) != erased_owner(CAROL, refs_a)
    # Without a master key there is no secret: the plain digest, as docs/privacy.md says.
    async with await AuditLog.open(f"sqlite:///{tmp_path / 'clear.db'}") as log:
        assert log.refs is UNKEYED and not log.refs.keyed
        assert erased_owner(ALICE, log.refs) == "erased:" + plain(ALICE)


async def test_an_erasure_after_the_upgrade_finds_and_refiles_what_plain_digests_named(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database written by a version before 0018 (plain digests everywhere): erasing a user
    again, or for the first time, finds it all and leaves the digest only in the old user
    chains, which stay readable and verify (their rows cannot be renamed)."""
    key = new_key()

    async def plain_refs(*_args: Any) -> UserRefs:
        return UNKEYED  # What every version before 0018 filed under.

    with monkeypatch.context() as old_version:
        old_version.setattr(audit_store, "_ref_key", plain_refs)
        orch = orchestrator(url, key)
        for person in (ALICE, CAROL):
            await orch.handle(f"{person}-0", STATES_A_FACT, user_id=person)
            await orch.handle(f"{person}-1", _app.ZOE_TEXT, user_id=person)
        await orch.drain()
        await orch.remember(ALICE, "Prefers Tamil", key="language")
        old = await orch.erase_user(ALICE)
        await orch.aclose()
    assert old.conversations == 2 and old.audit_keys == 1
    assert (await owners(url))[f"{ALICE}-0"] == "erased:" + plain(ALICE)
    assert await table_hits(url, [plain(CAROL)[:16]])  # Carol's key ref, her jobs' lock.

    # The upgrade: a ref key is made on the first open with the master key.
    refs = await refs_of(url, key)
    assert refs.keyed
    orch = orchestrator(url, key)
    await orch.handle(f"{CAROL}-1", "one more, after the upgrade", user_id=CAROL)
    later = datetime.now(UTC) + timedelta(days=200)
    assert orch.audit_log is not None
    # Retention finds keys filed either way (it goes by month): Carol's old and new one.
    dry = await apply_retention(None, orch.audit_log, timedelta(days=90), dry_run=True, now=later)
    assert dry.audit_keys == 2

    alice = await orch.erase_user(ALICE)  # Found under the old marker, given the new one.
    carol = await orch.erase_user(CAROL)  # Keys under both forms destroyed.
    third = [await orch.erase_user(p) for p in (ALICE, CAROL)]
    await orch.aclose()

    assert alice.conversations == 2 and alice.messages == 0 and alice.audit_keys == 0
    assert carol.conversations == 2 and carol.audit_keys == 2 and carol.messages == 6
    assert all(set(r.counts().values()) == {0} for r in third)
    found = await owners(url)
    assert {found[f"{ALICE}-0"], found[f"{ALICE}-1"]} == {erased_owner(ALICE, refs)}
    assert {found[f"{CAROL}-0"], found[f"{CAROL}-1"]} == {erased_owner(CAROL, refs)}
    # Only the user chains written before the upgrade keep the plain digest: the chain
    # covers its id, and the log is append-only.
    hits = await table_hits(url, [plain(ALICE)[:16], plain(CAROL)[:16]])
    assert set(hits) == {"audit_event", "audit_head"}, hits
    async with await AuditLog.open(url, master_key=key) as log:
        before = [e.kind for e in await log.events(legacy_user_chain_id(ALICE))]
        after = [e.kind for e in await log.events(user_chain_id(ALICE, refs))]
        rows = await log.events(f"{CAROL}-0")
    assert before == ["memory_written", "erased"]
    assert after == ["erased", "erased"]
    assert rows and all(r.payload.get("erased") for r in rows if r.encrypted)
    assert await verify_all(url)


async def test_a_users_waiting_memory_jobs_are_renamed_to_the_keyed_lock(url: str) -> None:
    """On PostgreSQL a succeeded job's row is deleted; one waiting or failed keeps its lock,
    so erasure renames it (`jobs.store.rename_lock`) on either backend."""
    refs = UserRefs(b"r" * 32)
    old, new = UNKEYED.job_lock("memory_lock", ALICE), refs.job_lock("memory_lock", ALICE)
    assert old == "memory:" + plain(ALICE)[:24] and new != old
    engine = create_engine(url)
    try:
        await ensure_schema(engine)
        spec = JobSpec(kind="memory.learn", args={"message_id": "m-1"}, lock=old)
        other = JobSpec(kind="memory.learn", args={"message_id": "m-2"}, lock="memory:else")
        await run_write(engine, lambda c: defer(c, [spec, other]))
        assert await run_write(engine, lambda c: rename_lock(c, old, new)) == 1
        assert await run_write(engine, lambda c: rename_lock(c, old, new)) == 0
        async with engine.connect() as conn:
            jobs = await conn.run_sync(lambda c: list_jobs(c))
    finally:
        await dispose_engine(engine)
    assert sorted(str(j.lock) for j in jobs) == sorted([new, "memory:else"])
