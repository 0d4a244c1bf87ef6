"""Audit blobs: a thread sent on every turn is stored once, read back whole, shredded with
its key, and a missing or edited blob fails `verify` (SQLite and PostgreSQL)."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from frontdesk.audit import blobs, compact, crypto
from frontdesk.audit.crypto import MasterKey
from frontdesk.audit.events import AuditEvent
from frontdesk.audit.store import AuditLog
from frontdesk.db import create_engine, run_write
from frontdesk.frozen import evolved

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'audit.db'}"
        return
    yield str(request.getfixturevalue("fresh_pg_url"))


def user_text(i: int) -> str:
    return f"Turn {i}: I was charged twice for order A-{10000 + i}, please check it for me."


def conversation(turns: int, *, prefix: str = "") -> list[list[AuditEvent]]:
    """Each turn's batch: its user text, and attempts that send the whole thread so far."""
    batches, thread = [], []
    for i in range(1, turns + 1):
        text = prefix + user_text(i)
        thread.append({"role": "user", "content": text})
        at = T0 + timedelta(minutes=i)
        messages = [dict(m) for m in thread]
        attempt = {
            "expert": "response",
            "model": "anthropic:claude-sonnet-4-5",
            "attempt": 1,
            "latency_ms": 12.5,
            "messages": messages,
            "request_body": {"model": "claude", "messages": messages, "max_tokens": 512},
            "response_body": {"content": [{"type": "text", "text": f"Reply {i}, all checked."}]},
            "output": f"Reply {i}, all checked.",
            "usage": {"input_tokens": 100 * i, "output_tokens": 9},
            "stage": {"$b": "a payload's own dict that looks like a reference"},
            "note": {"$l": ["nor is this one a reference"]},
        }
        batches.append(
            [
                AuditEvent(
                    kind="turn_started", turn_id=f"t{i}", payload={"text": text}, created_at=at
                ),
                AuditEvent(
                    kind="model_attempt",
                    turn_id=f"t{i}",
                    payload=attempt,
                    system_prompt="You answer.",
                    created_at=at + timedelta(seconds=1),
                ),
                AuditEvent(
                    kind="reply",
                    turn_id=f"t{i}",
                    created_at=at + timedelta(seconds=2),
                    payload={"text": f"Reply {i}, all checked.", "assistant_message_id": "a"},
                ),
            ]
        )
        thread.append({"role": "assistant", "content": f"Reply {i}, all checked."})
    return batches


def readable(kid: str | None, stored: bytes | str) -> str:
    """A stored payload or blob body as anyone with the database reads it: a deflated text
    inflated (compression hides nothing), a sealed body as base64 (it is ciphertext)."""
    if kid is not None:
        return stored if isinstance(stored, str) else base64.b64encode(stored).decode()
    return compact.inflate(stored)


async def stored_texts(url: str) -> list[str]:
    """Every payload and blob body as stored, readable (see `readable`)."""
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.text("SELECT payload_json FROM audit_event"))).scalars()
            texts = [readable(None, r) for r in rows]
            bodies = await conn.execute(sa.text("SELECT kid, body FROM audit_blob"))
            texts += [readable(kid, body) for kid, body in bodies]
    finally:
        await engine.dispose()
    return texts


async def _execute(url: str, sql: str, **params: Any) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text(sql), params)
    finally:
        await engine.dispose()


async def test_a_thread_sent_on_every_turn_is_stored_once_and_read_back_whole(
    db_url: str,
) -> None:
    batches = conversation(12)
    async with await AuditLog.open(db_url) as log:
        for batch in batches:
            await log.append("conv-1", batch, user_id="u-1")
        rows = await log.events("conv-1")
        assert (await log.verify("conv-1")).ok
    sent = [e.payload for batch in batches for e in batch]
    assert [r.payload for r in rows] == sent  # Exactly as written, the look-alike dict too.
    stored = "\n".join(await stored_texts(db_url))
    for i in range(1, 13):  # Sent 2 x (13 - i) times, stored once.
        assert stored.count(user_text(i)) == 1, i
    attempt = json.loads(rows[-2].payload_json)
    assert blobs.is_reference(attempt["messages"])  # The row keeps references, in order.


async def test_a_committed_batch_s_blobs_are_trusted_and_a_rolled_back_one_s_written_again(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's joint batch says its blobs are stored once its COMMIT is done, so the next
    batch does not look for them (one statement less per turn); blobs of a batch whose
    transaction rolled back are looked for, not found, and written again."""
    probes: list[dict[str, Any]] = []
    probe = blobs._STORED.rows

    def counted(conn: sa.Connection, params: dict[str, Any]) -> list[dict[str, Any]]:
        probes.append(params)
        return probe(conn, params)

    monkeypatch.setattr(blobs._STORED, "rows", counted)
    first, second, third = conversation(3)

    def rolled_back(conn: sa.Connection) -> None:
        log.append_sync(conn, "conv-1", first)
        raise RuntimeError("the turn's own write failed")

    async with await AuditLog.open(db_url) as log:
        with pytest.raises(RuntimeError):
            await run_write(log.engine, rolled_back)
        # The next batch sends turn 1's thread again: its blobs are looked for, and written.
        written = await run_write(log.engine, lambda conn: log.append_sync(conn, "conv-1", second))
        assert len(probes) == 1 and written
        log.committed(second, written)
        again = await run_write(log.engine, lambda conn: log.append_sync(conn, "conv-1", third))
        assert len(probes) == 1, "a committed batch's blobs are not looked for again"
        assert not set(again) & set(written), "nor written again"
        assert (await log.verify("conv-1")).ok  # No row points at a missing blob.
        rows = await log.events("conv-1")
    assert [r.payload for r in rows] == [e.payload for e in [*second, *third]]


async def _blobs_per_key(url: str) -> dict[str | None, int]:
    engine = create_engine(url)
    try:
        async with engine.connect() as conn:
            found = await conn.execute(sa.text("SELECT kid, count(*) FROM audit_blob GROUP BY kid"))
            return {str(kid) if kid else None: int(n) for kid, n in found}
    finally:
        await engine.dispose()


async def test_encrypted_blobs_are_sealed_and_addressed_by_a_keyed_hash(db_url: str) -> None:
    key = MasterKey.generate()
    async with await AuditLog.open(db_url, master_key=key) as log:
        for batch in conversation(3):
            await log.append("conv-a", batch, user_id="alice")
        hers = await _blobs_per_key(db_url)
        for batch in conversation(3):  # The same texts, another conversation of hers.
            await log.append("conv-a2", batch, user_id="alice")
        assert await _blobs_per_key(db_url) == hers  # Nothing new stored.
        for batch in conversation(3):  # The same texts from another user.
            await log.append("conv-b", batch, user_id="bob")
        a, a2, b = [await log.events(c) for c in ("conv-a", "conv-a2", "conv-b")]
        assert [r.payload for r in a] == [r.payload for r in b] == [r.payload for r in a2]
        assert (await log.verify()).ok
    both = await _blobs_per_key(db_url)
    assert len(hers) == 1 and len(both) == 2 and None not in both  # Bob's under his key.
    stored = "\n".join(await stored_texts(db_url))
    assert "charged twice" not in stored  # Sealed, in rows and blobs alike.
    text_json = json.dumps(user_text(1))
    plain = base64.urlsafe_b64encode(hashlib.sha256(text_json.encode()).digest()[:16])
    assert blobs.address(text_json, None) == plain.decode().rstrip("=")
    assert plain.decode().rstrip("=") not in stored  # Nobody can test a guess by hashing.


async def test_erasing_the_key_shreds_the_blobs_and_the_chain_still_verifies(
    db_url: str,
) -> None:
    key = MasterKey.generate()
    async with await AuditLog.open(db_url, master_key=key) as log:
        for batch in conversation(3):
            await log.append("conv-1", batch, user_id="alice")
        engine, ref = log.engine, log.refs.ref("data_key", "alice")
        async with engine.begin() as conn:
            destroyed = await conn.run_sync(lambda c: crypto.destroy(c, ref=ref))
        assert destroyed == 1
    async with await AuditLog.open(db_url, master_key=key) as log:
        rows = await log.events("conv-1")
        assert (await log.verify("conv-1")).ok
    attempt = rows[1].payload
    assert attempt["messages"] == [] and attempt["output"] == crypto.ERASED
    assert attempt["usage"] == {"input_tokens": 100, "output_tokens": 9}  # Clear fields stay.
    assert "charged twice" not in json.dumps([r.payload for r in rows])


async def test_verify_reports_a_missing_and_an_edited_blob(db_url: str) -> None:
    async with await AuditLog.open(db_url) as log:
        for batch in conversation(2):
            await log.append("conv-1", batch)
        assert (await log.verify("conv-1")).ok
        packed = json.loads((await log.events("conv-1"))[0].payload_json)
    ref = packed["text"][blobs.BLOB]
    await _execute(db_url, "UPDATE audit_blob SET body = :b WHERE ref = :r", b=b'"edited"', r=ref)
    async with await AuditLog.open(db_url) as log:
        report = await log.verify("conv-1")
    assert not report.ok and report.failures[0].problem is not None
    problem = report.failures[0].problem
    assert problem.kind == "edited" and problem.seq == 1 and ref in problem.detail
    await _execute(db_url, "DELETE FROM audit_blob WHERE ref = :r", r=ref)
    async with await AuditLog.open(db_url) as log:
        report = await log.verify("conv-1")
        shown = (await log.events("conv-1"))[0].payload
    assert report.failures[0].problem is not None
    assert report.failures[0].problem.kind == "missing" and shown["text"] == blobs.MISSING


@pytest.mark.parametrize("encrypted", [False, True], ids=["clear", "encrypted"])
async def test_a_redacted_row_carries_no_raw_blob_values(db_url: str, encrypted: bool) -> None:
    from frontdesk.audit.redaction import redact_rows

    card = "4111 1111 1111 1111"
    batches = conversation(3, prefix=f"My card is {card}. ")
    key = MasterKey.generate() if encrypted else None
    async with await AuditLog.open(db_url, master_key=key) as log:
        for batch in batches:
            await log.append("conv-1", batch, user_id="u-1")
        rows = await log.events("conv-1")
    assert any(r.blobs for r in rows) and card in json.dumps([r.payload for r in rows])
    shown = redact_rows(rows)
    assert [r.hash for r in shown] == [r.hash for r in rows]
    assert all(r.blobs is None and r.opener is None for r in shown)
    assert card not in json.dumps([r.payload for r in shown])
    assert card not in repr([vars(r) for r in shown])  # Nor anywhere else the row holds.


@pytest.mark.parametrize("key", [None, b"k" * 32], ids=["clear", "keyed"])
def test_a_warm_packer_packs_a_thread_as_a_cold_one_does(key: bytes | None) -> None:
    """The packing caches (a thread's messages, its lists and their chunk cuts) change no
    ref and lose no blob: every turn packs as it would in a fresh process."""
    warm = blobs.Addresses(key)
    for batch in conversation(30):
        for event in batch:
            cold = blobs.Packer(blobs.Addresses(key))
            expected = {name: cold.pack(value) for name, value in event.payload.items()}
            for _ in range(2):  # Packed before, then every part of it known already.
                again = blobs.Packer(warm)
                assert {n: again.pack(v) for n, v in event.payload.items()} == expected
                assert again.made == cold.made


def _packs_as_cold(warm: blobs.Addresses, value: Any) -> None:
    """`value` packs under the warm caches exactly as in a fresh process (refs and blobs)."""
    cold = blobs.Packer(blobs.Addresses(warm.key))
    again = blobs.Packer(warm)
    assert again.pack(value) == cold.pack(value)
    assert list(again.made.items()) == list(cold.made.items())


def _thread(turns: int, word: str = "charged") -> list[dict[str, str]]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i}: {word} " * 9}
        for i in range(turns)
    ]


def test_a_thread_changed_in_place_after_packing_is_packed_anew() -> None:
    """The packed-thread cache compares a list with its own copies of the items: a caller's
    list (or one of its dicts) changed after it was packed is not taken for what it was."""
    warm = blobs.Addresses(None)
    thread = _thread(12)
    _packs_as_cold(warm, thread)
    thread[3]["content"] = "changed in place"
    _packs_as_cold(warm, thread)
    thread[-1]["content"] = "the last one too"  # The item the cache looks threads up by.
    _packs_as_cold(warm, thread)
    thread.append({"role": "user", "content": "and one more"})  # Extends the changed one.
    _packs_as_cold(warm, thread)
    del thread[5]
    _packs_as_cold(warm, thread)


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda t: [*t[:-1], {**t[-1], "content": 1}], id="a number for a text"),
        pytest.param(lambda t: [*t[:4], {**t[4], "name": "x"}, *t[5:]], id="an extra key"),
        pytest.param(lambda t: [*t[:4], {"content": t[4]["content"]}, *t[5:]], id="a key less"),
        pytest.param(lambda t: [*t[:2], [*t[2].items()], *t[3:]], id="an item not a dict"),
        pytest.param(lambda t: [*t[:6], {**t[6], "content": [t[6]["content"]]}], id="a list"),
        pytest.param(lambda t: tuple(t), id="a tuple"),
        pytest.param(lambda t: [*t[:-1], {"content": t[-1]["content"]}], id="last differs"),
        pytest.param(lambda t: _thread(len(t), "billed"), id="same shape, other texts"),
        pytest.param(lambda t: t[1:], id="its tail"),
        pytest.param(lambda t: [*t, *t], id="twice over"),
    ],
)
def test_a_list_that_only_looks_like_a_packed_thread_packs_as_itself(other: Any) -> None:
    """Equal-looking lists (same length and last item, a prefix of a known thread, a value
    `==` to a text's) are packed as a fresh packer packs them, before and after the thread."""
    warm = blobs.Addresses(None)
    thread = _thread(10)
    _packs_as_cold(warm, thread)
    _packs_as_cold(warm, other(thread))
    _packs_as_cold(warm, thread)
    _packs_as_cold(warm, other(thread))


def test_a_thread_that_grows_packs_only_as_a_cold_packer_would() -> None:
    """Threads that extend a known one (one or two messages more, the chunking continued from
    it) or share only its beginning pack as in a fresh process; the cache stays bounded."""
    warm = blobs.Addresses(None)
    for turns in range(1, 40):
        _packs_as_cold(warm, _thread(turns))
        _packs_as_cold(warm, [*_thread(turns), {"role": "assistant", "content": "Instruction."}])
        _packs_as_cold(warm, [*_thread(turns)[:-1], {"role": "user", "content": "Edited."}])
    assert warm.threads_kept == sum(len(b) for b in warm.threads.values())


STORED_ROWS_SHA256 = "89fb786b2c0283206ae98025673640df47fc2c7d7fd4e83068bb6dabefa2e63a"
"""The digest of `_stored_rows` for `_pinned_batches`, as the code wrote them before the
turn's audit batch was made cheaper (issue 47): its rows, hashes and texts are unchanged."""


def _pinned_batches() -> list[list[AuditEvent]]:
    """`conversation(4)` with fixed event ids, a time with microseconds (the others are whole
    seconds) and a batch whose events belong to two turns, so every row is reproducible."""
    batches = conversation(4)
    n = 0
    out = []
    for i, batch in enumerate(batches):
        fixed = []
        for event in batch:
            n += 1
            changes: dict[str, Any] = {"event_id": f"{n:032x}"}
            if n == 2:
                changes["created_at"] = event.created_at + timedelta(microseconds=123457)
            if i == 2 and event.kind == "reply":
                changes["turn_id"] = "0123456789abcdef0123456789abcdef"
            fixed.append(evolved(event, **changes))
        out.append(fixed)
    return out


async def _stored_rows(url: str) -> str:
    """Every audit row of the database, its stored texts inflated (the deflated bytes are
    zlib's to make: another zlib may write other bytes for the same text), as one digest."""
    engine = create_engine(url)
    digest = hashlib.sha256()
    try:
        async with engine.connect() as conn:
            for table, order in [
                ("audit_event", "conversation_id, seq"),
                ("audit_blob", "ref"),
                ("audit_prompt", "sha256"),
                ("audit_head", "conversation_id"),
            ]:
                found = await conn.execute(sa.text(f"SELECT * FROM {table} ORDER BY {order}"))
                for row in found.mappings():
                    values = {
                        k: compact.inflate(v) if k in ("payload_json", "body") else v
                        for k, v in row.items()
                    }
                    digest.update(repr((table, sorted(values.items()))).encode())
    finally:
        await engine.dispose()
    return digest.hexdigest()


async def test_the_stored_rows_are_those_written_before(tmp_path: Path) -> None:
    """A conversation's rows, blobs, prompts and head, appended alone and joined to a
    transaction (`append_sync`), are byte for byte what they were (texts inflated)."""
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    batches = _pinned_batches()
    async with await AuditLog.open(url) as log:
        await log.append("conv-1", batches[0])
        for batch in batches[1:]:
            written = await run_write(
                log.engine,
                functools.partial(log.append_sync, events=batch, conversation_id="conv-1"),
            )
            log.committed(batch, written, "conv-1")
        assert (await log.verify("conv-1")).ok
    assert await _stored_rows(url) == STORED_ROWS_SHA256
