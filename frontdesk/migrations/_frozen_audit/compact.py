"""The stored form of audit texts: raw deflate with a preset dictionary (frozen copy of
`audit/compact.py` as `0017_audit_compact` was written).

Each audit row's payload JSON and each blob's body are small (a few hundred bytes) and
share most of their text with every other row: the payload keys, the envelope's fields,
the expert names, `{"$b": ...}` references. Compressed one by one without help, such short
texts barely shrink; with a dictionary of that shared text given to deflate up front they
come down to a third or less. The dictionary is part of the format: `DICTIONARY` never
changes once written (a new one gets a new format byte), so every stored row stays readable.

Stored form: the byte `0x01` and the raw deflate stream (`deflate`). `inflate` reads it
back, and also takes what the code before migration `0017_audit_compact` stored (the JSON
text itself, as text or UTF-8 bytes), so old and new rows read alike. The hash chain covers
the JSON text, never its compressed form: compressing changes no hash, and `audit verify`
reads rows back through `inflate` (no key needed). Compression is not encryption: a log in
clear is as readable as before to anyone with the database and this function.
"""

from __future__ import annotations

import threading
import zlib

FORMAT_DEFLATE_V1 = 0x01
"""The first byte of a text stored as raw deflate under `DICTIONARY` (never valid UTF-8 JSON
text, which starts with a printable character)."""

DICTIONARY = (
    '{"clear":{"attempt":1,"expert":"response","latency_ms":0.0,"model":"openai:gpt-4'
    '.1-mini","output_type":null,"prompt":{"name":"response","sha256":"00000000000000'
    '00000000000000000000000000000000000000000000000000","version":"1"},"provider_req'
    'uest_id":null,"settings":{"max_tokens":512,"temperature":null,"timeout":60.0},"s'
    'tatus_code":200,"stop_reason":"end_turn","usage":{"cache_read_tokens":0,"cache_w'
    'rite_tokens":0,"input_tokens":0,"output_tokens":0},"will_retry":false},"ct":"","'
    'enc":"aes-256-gcm","fields":{"error":"o","messages":"l","output":"s","request_bo'
    'dy":"d","response_body":"d"},"kid":"","nonce":"","zip":"deflate-1"}{"clear":{"ca'
    'tegory":"OTHER","expert":"request","kept":true,"triage_category":"OTHER","usage"'
    ':{"cache_read_tokens":0,"cache_write_tokens":0,"input_tokens":0,"output_tokens":'
    '0}},"ct":"","enc":"aes-256-gcm","fields":{"data":"d","instruction":"s","need_mor'
    'e_info":"o","reason":"s","request":"d","text":"s","user_id":"s"},"kid":"","nonce'
    '":"","zip":"deflate-1"}{"app":{"categories":{"HUMAN":"request@1"},"response":"re'
    'sponse@1","spec":null,"triage":"triage@1"},"client_message_id":"","parent_id":nu'
    'll,"text":{"$b":"AAAAAAAAAAAAAAAAAAAAAA"},"user_id":null,"user_message_id":""}{"'
    'category":"HUMAN","need_more_info":null,"request":{}}{"category":"HUMAN","data":'
    '{},"instruction":""}{"assistant_message_id":"","model":"anthropic:claude-haiku-4'
    '-5","prompt_versions":{},"text":{"$b":"AAAAAAAAAAAAAAAAAAAAAA"}}{"covered_until_'
    'message_id":"","error":null,"evicted":0,"stage":"finish","summary_id":""}{"exper'
    't":"summariser","max_tokens":1024,"messages":{"$l":["AAAAAAAAAAAAAAAAAAAAAA","AA'
    'AAAAAAAAAAAAAAAAAAAA"]},"output_type":null,"system":{"$b":"AAAAAAAAAAAAAAAAAAAAA'
    'A"}}{"attempt":1,"error":null,"expert":"triage","latency_ms":0.0,"messages":{"$b'
    '":"AAAAAAAAAAAAAAAAAAAAAA"},"model":"anthropic:claude-sonnet-4-5","output":{"cat'
    'egory":"HUMAN","reason":""},"output_type":"TriageDecision","prompt":{"name":"tri'
    'age","sha256":"0000000000000000000000000000000000000000000000000000000000000000"'
    ',"version":"1"},"provider_request_id":null,"request_body":{"$b":"AAAAAAAAAAAAAAA'
    'AAAAAAA"},"response_body":{"$b":"AAAAAAAAAAAAAAAAAAAAAA"},"settings":{"max_token'
    's":256,"temperature":null,"timeout":60.0},"speculation":"kept","status_code":nul'
    'l,"stop_reason":"end_turn","usage":{"cache_read_tokens":0,"cache_write_tokens":0'
    ',"input_tokens":0,"output_tokens":0},"will_retry":false}[{"content":{"$b":"AAAAA'
    'AAAAAAAAAAAAAAAAA"},"role":"user"},{"content":{"$b":"AAAAAAAAAAAAAAAAAAAAAA"},"r'
    'ole":"assistant"}]'
).encode("ascii")
"""The text shared by most audit payloads (canonical JSON of typical rows, envelopes and
thread chunks, the most common last, where deflate reaches it most cheaply). Frozen."""

_LEVEL = 6
_WBITS = 12
"""A 4 kB window: the dictionary and a row fit; a smaller state is cheaper to copy."""
_MEM_LEVEL = 5
_lock = threading.Lock()
_primed = zlib.compressobj(
    _LEVEL, zlib.DEFLATED, -_WBITS, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, DICTIONARY
)
"""A compressor with the dictionary loaded once; each text gets a copy (cheaper than
loading the dictionary again)."""


def deflate(text: str) -> bytes:
    """The stored form of a text (a payload's JSON, a blob's body): deflated, or its plain
    UTF-8 bytes when deflate would not make it shorter (a base64 text, say)."""
    data = text.encode("utf-8", "surrogatepass")
    with _lock:
        compressor = _primed.copy()
    packed = bytes((FORMAT_DEFLATE_V1,)) + compressor.compress(data) + compressor.flush()
    return packed if len(packed) < len(data) else data


def inflate(stored: bytes | bytearray | memoryview | str) -> str:
    """The text of a stored form: deflated (`deflate`), or the plain text older rows hold.

    Raises:
        ValueError: the bytes are neither (edited); `audit verify` reports the row.
    """
    if isinstance(stored, str):
        return stored
    return inflate_bytes(bytes(stored)).decode("utf-8", "surrogatepass")


def inflate_bytes(data: bytes) -> bytes:
    """The UTF-8 bytes of a stored form, or `data` itself when it is plain text."""
    if not data or data[0] != FORMAT_DEFLATE_V1:
        return data
    try:
        inflater = zlib.decompressobj(-15, zdict=DICTIONARY)
        out = inflater.decompress(data[1:]) + inflater.flush()
    except zlib.error as e:
        raise ValueError(f"stored audit text does not inflate ({e})") from e
    if not inflater.eof or inflater.unused_data:
        raise ValueError("stored audit text is cut short, or has bytes after its end")
    return out


def is_deflated(stored: bytes | bytearray | memoryview | str) -> bool:
    """Whether a stored value is in the deflated form (else it is plain text)."""
    return (
        not isinstance(stored, str)
        and len(stored) > 0
        and bytes(stored[:1])[0] == FORMAT_DEFLATE_V1
    )
