"""The audit store: append, read, the chain, and what `verify` names when rows are tampered."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from frontdesk.audit import compact
from frontdesk.audit.chain import GENESIS_HASH, Head, sha256_text
from frontdesk.audit.events import AuditEvent
from frontdesk.audit.store import AuditLog, time_bytes
from frontdesk.errors import AuditPayloadError, ConfigError

pytestmark = pytest.mark.anyio

MakeTurn = Callable[..., list[AuditEvent]]


async def _sql(log: AuditLog, sql: str, **params: Any) -> None:
    """Run tampering SQL with the append-only triggers out of the way (an attacker with DDL)."""
    async with log.engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            await conn.execute(text("DROP TRIGGER IF EXISTS audit_event_no_update"))
            await conn.execute(text("DROP TRIGGER IF EXISTS audit_event_no_delete"))
        else:
            await conn.execute(text("ALTER TABLE audit_event DISABLE TRIGGER USER"))
        await conn.execute(text(sql), params)


async def _two_turns(log: AuditLog, conv: str, make_turn: MakeTurn) -> int:
    await log.append(conv, make_turn("t1"))
    await log.append(conv, make_turn("t2", user_text="Actually two bags"))
    return len(await log.events(conv))


async def _problem(log: AuditLog, conv: str) -> tuple[int, str]:
    report = await log.verify(conv)
    assert not report.ok
    problem = report.conversations[0].problem
    assert problem is not None
    return problem.seq, problem.kind


async def test_append_chains_rows_and_stores_prompts_once(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    n = await _two_turns(audit_log, conv_id, make_turn)
    rows = await audit_log.events(conv_id)
    assert n == 16
    assert [r.seq for r in rows] == list(range(1, 17))
    assert rows[0].prev_hash == GENESIS_HASH
    assert all(b.prev_hash == a.hash for a, b in zip(rows, rows[1:], strict=False))
    assert rows[0].kind == "turn_started" and rows[0].payload["text"].startswith("I'd like")
    attempt = rows[1]
    assert attempt.kind == "model_attempt"
    assert attempt.system_prompt == "You are the triage expert. Pick one category."
    assert attempt.prompt_sha256 == sha256_text(attempt.system_prompt)
    async with audit_log.engine.connect() as conn:
        prompts = (await conn.execute(text("SELECT count(*) FROM audit_prompt"))).scalar_one()
    assert prompts == 3  # triage, request, response: each text once for two turns
    assert (await audit_log.verify(conv_id)).ok
    assert conv_id in await audit_log.conversations()
    assert (await audit_log.heads())[conv_id] == Head(16, rows[-1].hash)


async def test_odd_text_round_trips_and_verifies(audit_log: AuditLog, conv_id: str) -> None:
    odd = "nul\x00 lone\ud800 rtl\u202e emoji\U0001f954 <script>alert(1)</script>"
    event = AuditEvent(
        kind="turn_started", turn_id="t1", payload={"text": odd}, system_prompt=f"sys {odd}"
    )
    await audit_log.append(conv_id, [event])
    [row] = await audit_log.events(conv_id)
    assert row.payload["text"] == odd
    assert (await audit_log.verify(conv_id)).ok


async def test_rows_appended_while_verify_reads_are_not_a_truncation(
    audit_log: AuditLog, conv_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live conversation (a background job appending) verifies: the head and the rows
    are read in one snapshot, so rows committed between the two reads are in neither."""
    first = AuditEvent(kind="turn_started", turn_id="t1", payload={"text": "one"})
    await audit_log.append(conv_id, [first])
    read_rows = audit_log._events
    appended = []

    async def append_then_read(conn: Any, cid: str, **kwargs: Any) -> Any:
        later = AuditEvent(kind="turn_started", turn_id="t2", payload={"text": "two"})
        await audit_log.append(cid, [later])  # Committed after the head was read.
        appended.append(later)
        return await read_rows(conn, cid, **kwargs)

    monkeypatch.setattr(audit_log, "_events", append_then_read)
    report = await audit_log.verify(conv_id)
    assert appended and report.ok, report
    assert report.conversations[0].rows == 1  # As of the head's moment, not the append's.
    monkeypatch.undo()
    assert (await audit_log.verify(conv_id)).ok and len(await audit_log.events(conv_id)) == 2


async def test_nan_payload_is_a_typed_error(audit_log: AuditLog, conv_id: str) -> None:
    event = AuditEvent(kind="turn_started", turn_id="t1", payload={"x": math.nan})
    with pytest.raises(AuditPayloadError, match="NaN"):
        await audit_log.append(conv_id, [event])
    assert await audit_log.events(conv_id) == []


async def test_flipped_byte_names_the_row(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    await _two_turns(audit_log, conv_id, make_turn)
    rows = await audit_log.events(conv_id)
    flipped = rows[4].payload_json.replace("purple", "purplf", 1)
    assert flipped != rows[4].payload_json
    await _sql(
        audit_log,
        "UPDATE audit_event SET payload_json = :p WHERE conversation_id = :c AND seq = 5",
        p=flipped.encode(),  # Stored as plain text, the form rows had before 0017.
        c=conv_id,
    )
    assert await _problem(audit_log, conv_id) == (5, "edited")


@pytest.mark.parametrize("where", ["first", "middle", "cut"])
async def test_an_edit_of_the_deflated_bytes_is_seen(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn, where: str
) -> None:
    await _two_turns(audit_log, conv_id, make_turn)
    query = "SELECT payload_json FROM audit_event WHERE conversation_id = :c AND seq = 5"
    async with audit_log.engine.connect() as conn:
        stored = bytes((await conn.execute(text(query), {"c": conv_id})).scalar_one())
    assert compact.is_deflated(stored)  # What the log writes now.
    if where == "cut":
        edited = stored[:-3]
    else:
        at = 1 if where == "first" else len(stored) // 2
        edited = stored[:at] + bytes([stored[at] ^ 0x01]) + stored[at + 1 :]
    await _sql(
        audit_log,
        "UPDATE audit_event SET payload_json = :p WHERE conversation_id = :c AND seq = 5",
        p=edited,
        c=conv_id,
    )
    assert await _problem(audit_log, conv_id) == (5, "edited")


async def test_whitespace_edit_is_seen(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    await _two_turns(audit_log, conv_id, make_turn)
    rows = await audit_log.events(conv_id)
    spaced = json.dumps(rows[2].payload, sort_keys=True)  # same data, other bytes
    await _sql(
        audit_log,
        "UPDATE audit_event SET payload_json = :p WHERE conversation_id = :c AND seq = 3",
        p=spaced.encode(),
        c=conv_id,
    )
    assert await _problem(audit_log, conv_id) == (3, "edited")


async def test_deleted_middle_row(audit_log: AuditLog, conv_id: str, make_turn: MakeTurn) -> None:
    await _two_turns(audit_log, conv_id, make_turn)
    await _sql(
        audit_log, "DELETE FROM audit_event WHERE conversation_id = :c AND seq = 7", c=conv_id
    )
    assert await _problem(audit_log, conv_id) == (7, "missing")


async def test_inserted_row_in_the_middle(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    await _two_turns(audit_log, conv_id, make_turn)
    rows = await audit_log.events(conv_id)
    # Make room at seq 4 (two steps, so the unique key never sees a duplicate), then forge.
    await _sql(
        audit_log,
        "UPDATE audit_event SET seq = seq + 1000 WHERE conversation_id = :c AND seq >= 4",
        c=conv_id,
    )
    await _sql(
        audit_log,
        "UPDATE audit_event SET seq = seq - 999 WHERE conversation_id = :c AND seq >= 1000",
        c=conv_id,
    )
    await _sql(
        audit_log,
        "INSERT INTO audit_event (conversation_id, seq, event_id, kind, turn_id, created_at,"
        " payload_json, prompt_sha256, hash) VALUES (:c, 4, 'forged', 'triage',"
        " 't1', :t, '{\"category\":\"REFUNDS\"}', NULL, :h)",  # Its link is not stored.
        c=conv_id,
        t=time_bytes(rows[3].created_at),  # The stored forms of a time and a hash.
        h=b"\xff" * 32,
    )
    assert await _problem(audit_log, conv_id) == (4, "edited")


async def test_row_appended_past_the_head(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    n = await _two_turns(audit_log, conv_id, make_turn)
    last = (await audit_log.events(conv_id))[-1]
    # A forger who computes a valid hash still cannot move the head without being seen.
    from frontdesk.audit.chain import row_hash

    forged = row_hash(
        conversation_id=conv_id,
        seq=n + 1,
        event_id="forged",
        kind="reply",
        turn_id="t2",
        created_at=last.created_at,
        payload={"text": "refund!"},
        prompt_sha256=None,
        prev_hash=last.hash,
    )
    await _sql(
        audit_log,
        "INSERT INTO audit_event (conversation_id, seq, event_id, kind, turn_id, created_at,"
        " payload_json, prompt_sha256, hash) VALUES (:c, :s, 'forged', 'reply',"
        " 't2', :t, '{\"text\":\"refund!\"}', NULL, :h)",
        c=conv_id,
        s=n + 1,
        t=time_bytes(last.created_at),
        h=bytes.fromhex(forged),
    )
    assert await _problem(audit_log, conv_id) == (n + 1, "inserted")


async def test_swapped_rows(audit_log: AuditLog, conv_id: str, make_turn: MakeTurn) -> None:
    await _two_turns(audit_log, conv_id, make_turn)
    await _sql(
        audit_log,
        "UPDATE audit_event SET seq = -1 WHERE conversation_id = :c AND seq = 3",
        c=conv_id,
    )
    await _sql(
        audit_log,
        "UPDATE audit_event SET seq = 3 WHERE conversation_id = :c AND seq = 6",
        c=conv_id,
    )
    await _sql(
        audit_log,
        "UPDATE audit_event SET seq = 6 WHERE conversation_id = :c AND seq = -1",
        c=conv_id,
    )
    assert await _problem(audit_log, conv_id) == (3, "edited")


async def test_truncated_tail_is_seen_through_the_head(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    n = await _two_turns(audit_log, conv_id, make_turn)
    await _sql(
        audit_log,
        "DELETE FROM audit_event WHERE conversation_id = :c AND seq > :k",
        c=conv_id,
        k=n - 3,
    )
    seq, kind = await _problem(audit_log, conv_id)
    assert (seq, kind) == (n - 2, "truncated")
    verdict = (await audit_log.verify(conv_id)).conversations[0]
    assert verdict.problem is not None and f"records {n} rows" in verdict.problem.detail


async def test_truncation_with_rewritten_head_is_seen_only_through_an_anchor(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    n = await _two_turns(audit_log, conv_id, make_turn)
    anchors = await audit_log.heads()  # kept outside the database by ops
    rows = await audit_log.events(conv_id)
    await _sql(
        audit_log,
        "DELETE FROM audit_event WHERE conversation_id = :c AND seq > :k",
        c=conv_id,
        k=n - 3,
    )
    await _sql(
        audit_log,
        "UPDATE audit_head SET seq = :k, hash = :h WHERE conversation_id = :c",
        c=conv_id,
        k=n - 3,
        h=bytes.fromhex(rows[n - 4].hash),  # The stored form of a hash.
    )
    assert (await audit_log.verify(conv_id)).ok  # the database alone cannot tell
    report = await audit_log.verify(conv_id, anchors=anchors)
    problem = report.conversations[0].problem
    assert problem is not None and (problem.seq, problem.kind) == (n - 2, "truncated")
    assert "anchor" in problem.detail


async def test_deleted_head_is_seen(audit_log: AuditLog, conv_id: str, make_turn: MakeTurn) -> None:
    n = await _two_turns(audit_log, conv_id, make_turn)
    await _sql(audit_log, "DELETE FROM audit_head WHERE conversation_id = :c", c=conv_id)
    assert await _problem(audit_log, conv_id) == (n, "head")


async def test_edited_system_prompt_is_seen(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    await _two_turns(audit_log, conv_id, make_turn)
    rows = await audit_log.events(conv_id)
    await _sql(
        audit_log,
        "UPDATE audit_prompt SET text_json = '\"be evil\"' WHERE sha256 = :s",
        s=rows[1].prompt_sha256,
    )
    assert await _problem(audit_log, conv_id) == (2, "edited")


async def test_verify_all_names_only_the_bad_conversation(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    other = conv_id + "-other"
    await _two_turns(audit_log, conv_id, make_turn)
    await _two_turns(audit_log, other, make_turn)
    await _sql(audit_log, "DELETE FROM audit_event WHERE conversation_id = :c AND seq = 2", c=other)
    report = await audit_log.verify()
    assert not report.ok
    assert [v.conversation_id for v in report.failures] == [other]


async def test_app_cannot_update_or_delete_rows(
    audit_log: AuditLog, conv_id: str, make_turn: MakeTurn
) -> None:
    await audit_log.append(conv_id, make_turn("t1"))
    for sql in (
        "UPDATE audit_event SET kind = 'x' WHERE conversation_id = :c",
        "DELETE FROM audit_event WHERE conversation_id = :c",
    ):
        with pytest.raises(Exception, match="append-only"):
            async with audit_log.engine.begin() as conn:
                await conn.execute(text(sql), {"c": conv_id})
    assert (await audit_log.verify(conv_id)).ok


async def test_unknown_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="sqlite:///PATH"):
        await AuditLog.open("mysql://u@h/db")
    with pytest.raises(ConfigError, match="on_failure"):
        await AuditLog.open("sqlite://", on_failure="ignore")  # type: ignore[arg-type]
