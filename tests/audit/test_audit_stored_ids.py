"""The stored form of ids and digests (`store.id_bytes`): hex as bytes, text as itself."""

from __future__ import annotations

import uuid

import pytest

from frontdesk.audit.store import PROMPT_DIGEST, id_bytes, id_text
from frontdesk.threads._records import new_id

CASES = [
    uuid.uuid4().hex,
    new_id(),
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
    digest = "ab" * 32
    assert len(id_bytes(digest, PROMPT_DIGEST)) == 32
    assert id_text(id_bytes(digest, PROMPT_DIGEST), PROMPT_DIGEST) == digest
    assert id_text(id_bytes("x" * 32, PROMPT_DIGEST), PROMPT_DIGEST) == "x" * 32


def test_text_stored_by_hand_reads_as_it_is() -> None:
    assert id_text("moved") == "moved"
    assert id_text(b"moved") == "moved"
    assert id_text(None) is None
