"""The stored form of ids, digests and timestamps (`store.id_bytes`, `time_bytes`): exact."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from frontdesk.audit.events import AuditEvent, random_uuid4_hex
from frontdesk.audit.store import (
    PROMPT_DIGEST,
    _stamp,
    _utc_text,
    id_bytes,
    id_text,
    time_bytes,
    time_text,
)
from frontdesk.threads._records import new_id

# Fixed values (not drawn at import): pytest-xdist's workers must collect the same ids.
CASES = [
    "d5e91c5b3aa44157a3c66bcbe1974b68",  # A uuid4 hex (event ids).
    "01a2363ee0e27fcaf6f898e09aa8eddb",  # A `new_id()` (turn ids).
    "ff" * 16,
    "0" * 32,
    "ABCDEF0123456789ABCDEF0123456789",  # Upper case: not the hex form, kept as text.
    "0123456789abcdef0123456789abcde",  # 31 characters
    "erasure",
    "",
    "e" * 16,  # Text of exactly 16 bytes: marked so it never reads as hex.
    "é" * 8,
    "e" * 17,
    "lone\ud800surrogate",
    "conv\x00nul",
]


@pytest.mark.parametrize("value", CASES)
def test_every_id_reads_back_exactly(value: str) -> None:
    assert id_text(id_bytes(value)) == value
    assert id_text(id_bytes(value, PROMPT_DIGEST), PROMPT_DIGEST) == value


def test_hex_ids_take_half_their_text_and_digests_their_size() -> None:
    assert len(id_bytes(uuid.uuid4().hex)) == 16
    assert id_text(id_bytes(fresh := new_id())) == fresh and len(id_bytes(fresh)) == 16
    digest = "ab" * 32
    assert len(id_bytes(digest, PROMPT_DIGEST)) == 32
    assert id_text(id_bytes(digest, PROMPT_DIGEST), PROMPT_DIGEST) == digest
    assert id_text(id_bytes("x" * 32, PROMPT_DIGEST), PROMPT_DIGEST) == "x" * 32


def test_text_stored_by_hand_reads_as_it_is() -> None:
    assert id_text("moved") == "moved"
    assert id_text(b"moved") == "moved"
    assert id_text(None) is None


TIMES = [
    _utc_text(datetime(2026, 12, 2, 10, 13, 40, 194921, tzinfo=UTC)),
    _utc_text(datetime(1, 1, 1, tzinfo=UTC)),
    _utc_text(datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
    _utc_text(datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC)),
    "2026-01-01",  # Not the canonical form: kept as text.
    "2026-01-01T00:00:00+00:00",
    "2026-01-01T00:00:00.000000+01:00",
    "2026-01-01T00:00:00.000000Z",
    "abcdefgh",  # Eight bytes of text: marked so it never reads as a time.
    "",
    "lone\ud800",
]


@pytest.mark.parametrize("value", TIMES)
def test_every_timestamp_reads_back_exactly(value: str) -> None:
    assert time_text(time_bytes(value)) == value


def test_a_canonical_timestamp_takes_eight_bytes() -> None:
    assert len(time_bytes(_utc_text(datetime.now(UTC)))) == 8
    assert time_text("2026-01-01") == "2026-01-01"  # Stored by hand as text.


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC),
        datetime(2026, 3, 1, 12, 30, 5),  # Naive: taken as UTC.
        datetime(2026, 3, 1, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-5))),
        datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_an_events_time_is_stored_as_its_text_would_be(moment: datetime) -> None:
    """`_stamp` makes the stored form from the datetime, not by parsing its text back."""
    assert _stamp(moment) == (_utc_text(moment), time_bytes(_utc_text(moment)))


@given(
    st.datetimes(
        timezones=st.one_of(
            st.none(),
            st.just(UTC),
            st.builds(timezone, st.timedeltas(timedelta(hours=-23), timedelta(hours=23))),
        )
    )
)
def test_any_moment_is_stamped_as_its_text_would_be(moment: datetime) -> None:
    """`_stamp`'s text is `isoformat()`'s own unless the microseconds are 0: equal to
    `_utc_text` for every moment, whole seconds too, in any zone (or none)."""
    try:
        text = _utc_text(moment)
    except OverflowError:  # Out of range once moved to UTC: `_stamp` refuses it as well.
        with pytest.raises(OverflowError):
            _stamp(moment)
        return
    assert _stamp(moment) == (text, time_bytes(text))


def test_event_ids_are_random_uuid4_hex_and_never_repeat() -> None:
    """Ids are made ahead in bulk (`events._fresh_ids`): still each a uuid4's hex, unique,
    in the form `id_bytes` stores as 16 bytes."""
    ids = [AuditEvent(kind="reply", turn_id="t", payload={}).event_id for _ in range(500)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(value)
        assert parsed.hex == value and parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert len(id_bytes(value)) == 16


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_process_does_not_take_its_parents_ids() -> None:
    """Ids made ahead are the parent's: a child (a forked worker) makes its own."""
    random_uuid4_hex()  # The parent now holds ids made ahead.
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        os.write(write, random_uuid4_hex().encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    childs = os.read(read, 64).decode()
    os.close(read)
    assert status == 0
    assert childs != random_uuid4_hex()
