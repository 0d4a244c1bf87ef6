"""The stored form of audit texts (`audit.compact`): deflated under a frozen dictionary,
read back exactly, older plain forms read alike, edits refused."""

from __future__ import annotations

import base64
import hashlib
import json
import os

import pytest

from frontdesk.audit import compact
from frontdesk.audit.chain import canonical_json

DICTIONARY_SHA256 = "878c454e5e03b992a7a8e43e313313cdead804565157afb60d218671d574df7a"
"""Rows stored under format 0x01 are read with this very dictionary: it may never change
(a new one needs a new format byte and a migration that keeps the old one readable)."""


def test_the_dictionary_is_frozen() -> None:
    assert hashlib.sha256(compact.DICTIONARY).hexdigest() == DICTIONARY_SHA256


@pytest.mark.parametrize(
    "value",
    [
        {"expert": "triage", "messages": {"$b": "AAAAAAAAAAAAAAAAAAAAAA"}, "usage": {}},
        {"text": "Zoë Ångström paid £12 ✓", "n": 1.5},
        {"text": "a lone surrogate \ud800 is escaped by canonical JSON"},
        "",
        [{"content": "x" * 5000, "role": "user"}],  # Longer than the 4 kB window.
    ],
    ids=["payload", "non-ascii", "surrogate", "empty", "long"],
)
def test_a_text_reads_back_exactly(value: object) -> None:
    text = canonical_json(value)
    stored = compact.deflate(text)
    assert compact.inflate(stored) == text
    if len(text) > 100:  # Short texts shrink less (still stored the shorter way).
        assert compact.is_deflated(stored) and len(stored) < len(text.encode()) / 2


def test_what_does_not_shrink_is_stored_plain_and_older_forms_read_alike() -> None:
    noise = json.dumps(base64.b64encode(os.urandom(60)).decode())
    stored = compact.deflate(noise)
    assert not compact.is_deflated(stored) and compact.inflate(stored) == noise
    assert compact.inflate('{"text":"as stored before 0017"}') == '{"text":"as stored before 0017"}'
    assert compact.inflate(b'{"a":1}') == '{"a":1}'


@pytest.mark.parametrize("edit", ["flip", "cut", "append"])
def test_an_edited_stored_form_is_refused(edit: str) -> None:
    stored = compact.deflate(canonical_json({"text": "Ok great, please press confirm." * 3}))
    if edit == "flip":
        edited = stored[:2] + bytes([stored[2] ^ 0xFF]) + stored[3:]
    elif edit == "cut":
        edited = stored[:-2]
    else:
        edited = stored + b"\x00"
    try:
        text = compact.inflate(edited)
    except ValueError:
        return
    assert text != compact.inflate(stored)  # Inflated to another text: the hash fails.
