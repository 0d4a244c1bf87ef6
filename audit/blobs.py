"""Audit blobs: the large, repeated parts of payloads stored once, by content address.

Every expert call's row used to repeat the thread it was sent, so each message was stored
again on every later turn. Now the content fields of a payload (everything but
`crypto.CLEAR_FIELDS`) are *packed* before they are stored: a text of `MIN_TEXT`
characters or more becomes `{"$b": ref}`, a dict whose packed JSON is `MIN_DICT` bytes or
more becomes one too, and a long list becomes `{"$l": [ref, ...]}`, its items cut into
chunks at content-defined places (an item ends a chunk when its address says so), so two
threads that share a run of messages share the chunks inside it, as backup tools
deduplicate files. The row keeps the refs in order, so the hash chain covers them.

`ref` is 128 bits of a keyed hash, base64url: HMAC-SHA256 under a key derived from the
row's data key (the owner's key for the month, see `crypto`) when payloads are encrypted,
so one user's equal texts share a blob while nobody without the key can test a guess;
plain SHA-256 when the log is in clear (the texts are readable there anyway). An encrypted
blob is AES-256-GCM under that same data key, with its ref as associated data, so it
cannot be moved or swapped. Destroying the data key (erasure, retention) makes the blobs
unreadable and their addresses unguessable, as it does the payloads.

The rows of `audit_blob` (migration `0014_audit_blobs`) hold a clear blob's JSON deflated
(`audit.compact`) and a sealed one's nonce and ciphertext as raw bytes (migration
`0017_audit_compact`; base64 text before). They are written by `AuditLog.append`
in the batch's transaction; `expand` puts the values back for every reader, so
`audit show`, the exports, replay and verify see the payloads exactly as they were.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import Connection, bindparam, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from frontdesk._driver import Statement
from frontdesk.audit import compact
from frontdesk.audit.chain import canonical_json
from frontdesk.audit.tables import audit_blob

BLOB = "$b"
"""The key of a reference to one stored value: `{"$b": ref}`."""
LIST = "$l"
"""The key of a list stored as chunks: `{"$l": [ref, ...]}` (each chunk a list blob)."""
ESCAPE = "$e"
"""Wraps a payload's own dict that looks like a reference: `{"$e": {...}}`."""
_MARKS = frozenset({BLOB, LIST, ESCAPE})

MIN_TEXT = 48
"""Texts this long or longer are stored as blobs (shorter ones cost less inline)."""
MIN_DICT = 256
"""Dicts whose packed JSON is this long or longer are stored as blobs."""
MIN_LIST = 192
"""Lists whose packed JSON is this long or longer are stored as chunks."""
CHUNK_END = frozenset("ABCDEFGH")
"""An item ends a chunk when the address of it and the item before it starts with one of
these 8 of 64 letters (8 items on average), so a chunk's bounds depend only on its items,
not on where the list starts."""

_CACHE_LIMIT = 50_000
_SCALARS: dict[Any, str] = {None: "null", True: "true", False: "false"}
_KEYS: dict[str, str] = {}
"""Payload keys' JSON texts (a few dozen names)."""
_BLOB_AAD = b"frontdesk-audit-blob\x00"
_ADDRESS_INFO = b"frontdesk audit blob address"


def address_key(data_key: bytes) -> bytes:
    """The HMAC key of a data key's blob addresses (a key of its own, derived one way)."""
    return hmac.digest(data_key, _ADDRESS_INFO, "sha256")


def address(text: str, key: bytes | None) -> str:
    """A value's ref: 128 bits of HMAC-SHA256 under `key` (plain SHA-256 without), base64url."""
    data = text.encode("utf-8", "surrogatepass")
    digest = hashlib.sha256(data).digest() if key is None else hmac.digest(key, data, "sha256")
    return base64.urlsafe_b64encode(digest[:16]).decode("ascii").rstrip("=")


def is_reference(value: Any) -> bool:
    """Whether a packed value is a reference (`{"$b": ref}` or `{"$l": [...]}`)."""
    return isinstance(value, dict) and len(value) == 1 and (BLOB in value or LIST in value)


_THREADS_KEPT = 10_000
_THREADS_PER_SIGNATURE = 4
"""Packed threads kept per (length, last item): conversations that end alike at the same
length (a "yes" as the fifth message) are told apart by their other items."""
_PREFIX_PROBES = 4
"""How many shorter prefixes a new thread is looked up by: the next attempt sends one more
message (the instruction), the next turn two (the reply, the customer's message)."""


@dataclass(frozen=True, slots=True)
class _Thread:
    """A long list of flat dicts of texts as packed, and where its chunking stands, so a
    thread that extends it packs only its new items."""

    items: tuple[dict[str, str], ...]
    """Copies of the list's items (a caller's list changed later does not change them)."""
    closed: tuple[str, ...]
    """The refs of its chunks that ended at a cut."""
    open: tuple[str, ...]
    """The texts of the items after the last cut (its last chunk as packed, open here)."""
    last: str
    """Its last item's text (the one before the next item, for the cut)."""
    item_blobs: dict[str, str]
    """The blobs its items refer to, in order: ref -> JSON text."""
    chunk_blobs: dict[str, str]
    """The blobs of `closed`, in order."""
    packed: Any
    text: str
    made: dict[str, str]
    """Every blob the packed list refers to, in the order packing meets them."""


def _signature(
    value: list[Any] | tuple[Any, ...], length: int
) -> tuple[int, tuple[tuple[str, str], ...]]:
    """A list's first `length` items' key in `Addresses.threads`: the length and the last
    item's items (raises `TypeError` when that item is not a flat dict)."""
    return length, tuple(dict.items(value[length - 1]))


def _starts_with(value: list[Any] | tuple[Any, ...], items: tuple[dict[str, str], ...]) -> bool:
    """Whether `value` begins with dicts equal to `items` (compared in C, item by item: a
    text equals only a text, so no two lists `json` writes differently are taken alike)."""
    if len(value) < len(items):
        return False
    try:
        return all(map(dict.__eq__, value, items))
    except TypeError:  # An item is not a dict.
        return False


def _flat(items: Iterable[Any]) -> bool:
    """Whether every item is a dict of texts (to texts): what `_Thread` keeps."""
    for item in items:
        if not isinstance(item, dict):
            return False
        for key, text in item.items():
            if type(key) is not str or type(text) is not str:
                return False
    return True


@dataclass
class Addresses:
    """The refs one key has given, cached, and the refs known to be stored (per process).

    A ref is known to be stored once a later batch saw it committed (`confirm`); until then
    each batch that needs it inserts it again, idempotently, so a rolled-back batch never
    leaves a row pointing at nothing.
    """

    key: bytes | None
    refs: dict[str, str] = field(default_factory=dict)
    packed: dict[Any, tuple[Any, str, tuple[tuple[str, str], ...]]] = field(default_factory=dict)
    """Packed texts and small flat dicts (the thread's messages), with their JSON and the
    blobs (ref, text) they refer to."""
    threads: dict[tuple[int, tuple[tuple[str, str], ...]], list[_Thread]] = field(
        default_factory=dict
    )
    """Packed long lists of flat dicts of texts (a thread's messages), by their length and
    last item (`_signature`), a few per key, each checked item by item against the list:
    a thread sent again is found without building a key of its whole content, and a thread
    that grew (the next attempt or turn) continues the chunking of the one it extends."""
    threads_kept: int = 0
    cuts: dict[tuple[str, str], bool] = field(default_factory=dict)
    """Whether an item ends a chunk, by (the item before's JSON, its own): a thread that
    grew by a message is cut again without hashing its older pairs again."""

    def of(self, text: str) -> str:
        """The ref of a JSON text (cached)."""
        ref = self.refs.get(text)
        if ref is None:
            if len(self.refs) >= _CACHE_LIMIT:
                self.clear()
            ref = self.refs[text] = address(text, self.key)
        return ref

    def ends_chunk(self, before: str, item: str) -> bool:
        """Whether `item` (JSON) ends a chunk after `before` (see `CHUNK_END`; cached)."""
        pair = (before, item)
        cut = self.cuts.get(pair)
        if cut is None:
            if len(self.cuts) >= _CACHE_LIMIT:
                self.clear()
            cut = self.cuts[pair] = address(before + "," + item, self.key)[0] in CHUNK_END
        return cut

    def thread(self, value: list[Any] | tuple[Any, ...], length: int) -> _Thread | None:
        """The packed thread whose items equal the first `length` items of `value`."""
        try:
            bucket = self.threads.get(_signature(value, length))
        except TypeError:  # The last item is not a dict, or holds a list or dict.
            return None
        for thread in bucket or ():
            if _starts_with(value, thread.items):
                return thread
        return None

    def keep(self, thread: _Thread) -> None:
        """Remember a packed thread (the newest first among those of its signature)."""
        if self.threads_kept >= _THREADS_KEPT:
            self.threads.clear()
            self.threads_kept = 0
        bucket = self.threads.setdefault(_signature(thread.items, len(thread.items)), [])
        bucket.insert(0, thread)
        self.threads_kept += 1
        if len(bucket) > _THREADS_PER_SIGNATURE:
            bucket.pop()
            self.threads_kept -= 1

    def clear(self) -> None:
        """Forget every cached ref and packing."""
        self.refs.clear()
        self.packed.clear()
        self.threads.clear()
        self.threads_kept = 0
        self.cuts.clear()


@dataclass
class Packer:
    """Packs the content fields of one batch's payloads under one key's addresses."""

    addresses: Addresses
    made: dict[str, str] = field(default_factory=dict)
    """The blobs this packer referenced: ref -> JSON text."""

    def pack(self, value: Any) -> Any:
        """`value` with its large parts replaced by references (see the module docstring)."""
        return self._value(value)[0]

    def payload(
        self, payload: Mapping[str, Any], clear: frozenset[str]
    ) -> tuple[dict[str, Any], str]:
        """A payload with its content fields packed (the `clear` ones kept as they are) and
        its canonical JSON (`_json`: the packed payload is small, its large parts refs)."""
        packed = {k: v if k in clear else self._value(v)[0] for k, v in payload.items()}
        return packed, _json(packed) or canonical_json(packed)

    def _value(self, value: Any) -> tuple[Any, str]:
        """The packed value and its JSON text."""
        if isinstance(value, str):
            return self._memo(value, value)
        if isinstance(value, dict):
            if len(value) <= 3:  # A message of the thread, most often: seen before.
                try:
                    key: Any = tuple(value.items())
                    found = self.addresses.packed.get(key)
                except TypeError:  # A list or dict inside: not a flat dict.
                    key, found = None, None
                if found is not None:
                    self.made.update(found[2])
                    return found[0], found[1]
                if key is not None and all(type(k) is str and type(v) is str for k, v in key):
                    return self._memo(key, value)
            return self._dict(value)
        if isinstance(value, list | tuple):
            return self._list(value)
        if value is None or value is True or value is False:
            return value, _SCALARS[value]
        if type(value) is int:
            return value, str(value)
        if type(value) is float and math.isfinite(value):
            return value, repr(value)  # What `json` writes for a finite float.
        return value, canonical_json(value)  # Raises for what is not JSON.

    def _memo(self, key: Any, value: Any) -> tuple[Any, str]:
        """A text's or a flat dict's packing, from the cache (the thread repeats them)."""
        cache = self.addresses.packed
        found = cache.get(key)
        if found is None:
            if len(cache) >= _CACHE_LIMIT:
                self.addresses.clear()
            made, self.made = self.made, {}
            packed: tuple[Any, str]
            if isinstance(value, str):
                text = _json(value) or canonical_json(value)
                packed = self._blob(text) if len(value) >= MIN_TEXT else (value, text)
            else:
                packed = self._dict(value)
                if packed[0] is value:  # Its own copy: the cache outlives the caller's dict.
                    packed = (dict(value), packed[1])
            found = cache[key] = (packed[0], packed[1], tuple(self.made.items()))
            made.update(self.made)
            self.made = made
        else:
            self.made.update(found[2])  # The blobs it refers to may be new to this batch.
        return found[0], found[1]

    def _blob(self, text: str) -> tuple[dict[str, str], str]:
        ref = self.addresses.of(text)
        self.made[ref] = text
        return {BLOB: ref}, f'{{"{BLOB}":"{ref}"}}'

    def _dict(self, value: Mapping[str, Any]) -> tuple[Any, str]:
        text = _kept_whole(value)
        if text is not None:
            return value, text
        packed, parts = {}, []
        for key in sorted(value):
            item, text = self._value(value[key])
            packed[key] = item
            parts.append(f"{_key_json(key)}:{text}")
        text = "{" + ",".join(parts) + "}"
        if len(packed) == 1 and next(iter(packed)) in _MARKS:  # Not to be read as a ref.
            packed, text = {ESCAPE: packed}, f'{{"{ESCAPE}":{text}}}'
        if len(text) >= MIN_DICT:
            return self._blob(text)
        return packed, text

    def _list(self, value: Iterable[Any]) -> tuple[Any, str]:
        value = value if isinstance(value, list | tuple) else list(value)
        if value and type(value[-1]) is dict:  # A thread, most often: packed before?
            found = self.addresses.thread(value, len(value))
            if found is not None:  # The same thread again: its items and chunks are known.
                self.made.update(found.made)
                return found.packed, found.text
            base = self._base(value)
            if base is not None and _flat(value[len(base.items) :]):
                return self._thread(value, base)
        made, self.made = self.made, {}
        items = [self._value(item) for item in value]
        texts = [t for _, t in items]
        text = "[" + ",".join(texts) + "]"
        if len(text) < MIN_LIST:
            made.update(self.made)
            self.made = made
            return [i for i, _ in items], text
        self.made, item_blobs = made, self.made
        if _flat(value):
            return self._chunked(value, texts, item_blobs, None, keep=True)
        return self._chunked(value, texts, item_blobs, None, keep=False)

    def _base(self, value: list[Any] | tuple[Any, ...]) -> _Thread | None:
        """The longest packed thread that `value` extends (among its last few prefixes)."""
        for length in range(len(value) - 1, max(len(value) - 1 - _PREFIX_PROBES, 0), -1):
            found = self.addresses.thread(value, length)
            if found is not None:
                return found
        return None

    def _thread(self, value: list[Any] | tuple[Any, ...], base: _Thread) -> tuple[Any, str]:
        """Pack a thread that extends `base`: only its new items, its chunking continued."""
        made, self.made = self.made, dict(base.item_blobs)
        texts = [self._value(item)[1] for item in value[len(base.items) :]]
        self.made, item_blobs = made, self.made
        return self._chunked(value, texts, item_blobs, base, keep=True)

    def _chunked(
        self,
        value: list[Any] | tuple[Any, ...],
        texts: list[str],
        item_blobs: dict[str, str],
        base: _Thread | None,
        *,
        keep: bool,
    ) -> tuple[Any, str]:
        """A long list as chunks: the texts of its items (those after `base`'s, when it
        extends that thread), cut where their addresses say, so the chunks depend only on
        the items, not on where packing began; kept as a thread with `keep`."""
        outer, self.made = self.made, {} if base is None else dict(base.chunk_blobs)
        refs = [] if base is None else list(base.closed)
        chunk = [] if base is None else list(base.open)
        before = "" if base is None else base.last
        for item_text in texts:
            chunk.append(item_text)
            # The item with the one before it decides, so a value that recurs (the same
            # answer on every turn) does not cut the list at each of its places.
            if self.addresses.ends_chunk(before, item_text):
                refs.append(self._blob("[" + ",".join(chunk) + "]")[0][BLOB])
                chunk = []
            before = item_text
        closed, chunk_blobs = tuple(refs), dict(self.made)
        if chunk:
            refs.append(self._blob("[" + ",".join(chunk) + "]")[0][BLOB])
        packed: Any = {LIST: refs}
        text = '{"' + LIST + '":["' + '","'.join(refs) + '"]}'  # Refs are base64url: no escape.
        if len(text) >= MIN_DICT:  # The same list often goes out twice (messages, wire body).
            packed, text = self._blob(text)
        made = item_blobs | self.made
        self.made = outer
        self.made.update(made)
        if keep:
            kept = () if base is None else base.items
            self.addresses.keep(
                _Thread(
                    items=kept + tuple(map(dict, value[len(kept) :])),
                    closed=closed,
                    open=tuple(chunk),
                    last=before,
                    item_blobs=item_blobs,
                    chunk_blobs=chunk_blobs,
                    packed=packed,
                    text=text,
                    made=made,
                )
            )
        return packed, text


def _key_json(key: str) -> str:
    """A payload key's JSON text (cached: a few dozen names)."""
    text = _KEYS.get(key)
    if text is None:
        text = canonical_json(key)
        if len(_KEYS) < _CACHE_LIMIT:
            _KEYS[key] = text
    return text


_SMALL = 4
"""Lists and dicts this long or shorter may leave a dict small (`_kept_whole`)."""
_DEEP = 8
"""How deep `_short_texts` looks before it gives up (packing part by part then)."""


def _kept_whole(value: Mapping[str, Any]) -> str | None:
    """The canonical JSON of a dict that packing leaves as it is (short: no text, list or
    dict in it reaches its threshold; no key a reference's), written in C at once; `None`
    for any other dict (then packed part by part)."""
    if not _short_texts(value.values(), 0):
        return None
    text = _json(value)
    if text is None or len(text) >= MIN_LIST or '"$' in text:
        return None
    return text


def _short_texts(values: Iterable[Any], depth: int) -> bool:
    """Whether no text among `values` (and in the lists and dicts among them) is `MIN_TEXT`
    long, and no list or dict holds more than `_SMALL` items."""
    for item in values:
        if isinstance(item, str):
            if len(item) >= MIN_TEXT:
                return False
        elif isinstance(item, dict):
            if len(item) > _SMALL or depth >= _DEEP or not _short_texts(item.values(), depth + 1):
                return False
        elif isinstance(item, list | tuple):
            if len(item) > _SMALL or depth >= _DEEP or not _short_texts(item, depth + 1):
                return False
    return True


def _not_plain(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not plain JSON")


_encode = (
    None
    if c_make_encoder is None
    else c_make_encoder(None, _not_plain, encode_basestring, None, ":", ",", True, False, False)
)
"""`json`'s own C encoder with `canonical_json`'s settings, made once (`json.dumps` makes
one per call, which costs more than encoding a small value)."""


def _json(value: Any) -> str | None:
    """`canonical_json(value)` for plain JSON without a lone surrogate (for which that
    escapes the whole text), written by `_encode`; `None` for anything else (`json` converts
    or refuses it: then `canonical_json` itself)."""
    if _encode is None:
        return None
    try:
        text = "".join(_encode(value, 0))
    except (TypeError, ValueError, RecursionError):  # Not plain JSON, NaN, too deep.
        return None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return text


def references(value: Any) -> set[str]:
    """Every ref a packed value (or a blob's decoded value) holds directly."""
    found: set[str] = set()
    _collect(value, found)
    return found


def _collect(value: Any, found: set[str]) -> None:
    if isinstance(value, dict):
        if len(value) == 1:
            if BLOB in value and isinstance(value[BLOB], str):
                found.add(value[BLOB])
                return
            if LIST in value and isinstance(value[LIST], list):
                found.update(r for r in value[LIST] if isinstance(r, str))
                return
            if ESCAPE in value and isinstance(value[ESCAPE], dict):
                value = value[ESCAPE]  # Its own keys are data, never marks.
        for item in value.values():
            _collect(item, found)
    elif isinstance(value, list):
        for item in value:
            _collect(item, found)


MISSING = "[missing]"
"""What a blob reads as when it is not stored (`audit verify` reports the row)."""


def expand(value: Any, blobs: Mapping[str, Any]) -> Any:
    """A packed value with every reference replaced by the value stored for it."""
    if isinstance(value, dict):
        if len(value) == 1:
            if BLOB in value and isinstance(value[BLOB], str):
                if value[BLOB] not in blobs:
                    return MISSING
                return expand(blobs[value[BLOB]], blobs)
            if LIST in value and isinstance(value[LIST], list):
                out: list[Any] = []
                for ref in value[LIST]:
                    chunk = expand({BLOB: ref}, blobs)
                    out.extend(chunk if isinstance(chunk, list) else [chunk])
                return out
            if ESCAPE in value and isinstance(value[ESCAPE], dict):
                return {k: expand(v, blobs) for k, v in value[ESCAPE].items()}
        return {k: expand(v, blobs) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(item, blobs) for item in value]
    return value


# Storage.

_INSERT = Statement(
    sqlite_insert(audit_blob).on_conflict_do_nothing(),
    postgresql=pg_insert(audit_blob).on_conflict_do_nothing(),
    columns=["ref", "kid", "body"],
)
_PROBE = 32
"""Refs asked about per statement: a fixed number (the list padded), so the statement is
built once and runs on the SQLite writer's driver directly (`Statement`)."""
_STORED = Statement(
    select(audit_blob.c.ref).where(
        audit_blob.c.ref.in_([bindparam(f"r{i}") for i in range(_PROBE)])
    )
)


def seal(text: str, ref: str, aead: AESGCM) -> bytes:
    """An encrypted blob body: nonce and AES-GCM ciphertext (raw bytes), bound to its ref.

    The text is deflated before it is sealed (`audit.compact`; a ciphertext cannot be
    compressed after). The sealed length then follows how repetitive the text is, not only
    how long: with the database, one sees that much more of a blob than its size; the blob
    is one value (a message, a chunk of references), and its address and text stay secret.
    """
    return _encrypt(compact.deflate(text), ref, aead)


def _encrypt(data: bytes, ref: str, aead: AESGCM) -> bytes:
    nonce = os.urandom(12)
    return nonce + aead.encrypt(nonce, data, _BLOB_AAD + ref.encode())


def decrypt(body: bytes | str, ref: str, aead: AESGCM) -> bytes | None:
    """A sealed body's plaintext as sealed (deflated or not), `None` when it does not
    decrypt under this ref; `body` is raw bytes, or base64 text (before `0017`)."""
    try:
        raw = base64.b64decode(body) if isinstance(body, str) else bytes(body)
        return aead.decrypt(raw[:12], raw[12:], _BLOB_AAD + ref.encode())
    except (InvalidTag, ValueError):
        return None


def unseal(body: bytes | str, ref: str, aead: AESGCM) -> str | None:
    """A sealed body's text, or `None` when it does not decrypt under this ref (edited).

    `body` is raw bytes, or base64 text as stored before migration `0017_audit_compact`;
    the plaintext is deflated (`seal`), or the JSON text itself (sealed before `0017`).
    """
    plain = decrypt(body, ref, aead)
    if plain is None:
        return None
    try:
        return compact.inflate(plain)
    except ValueError:
        return None


@dataclass
class Stored:
    """The refs this process knows are committed, and those written but not yet seen so."""

    known: set[str] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)

    def confirm(self, conn: Connection) -> None:
        """Move the pending refs that are committed now to `known` (one query)."""
        if not self.pending:
            return
        refs = sorted(self.pending)
        self.pending.clear()
        for start in range(0, len(refs), _PROBE):
            chunk = refs[start : start + _PROBE]
            params = {f"r{i}": chunk[i] if i < len(chunk) else chunk[0] for i in range(_PROBE)}
            self._know([row["ref"] for row in _STORED.rows(conn, params)])

    def committed(self, refs: Iterable[str]) -> None:
        """Refs whose batch the caller saw committed: known without a probe."""
        refs = list(refs)
        self.pending.difference_update(refs)
        self._know(refs)

    def _know(self, refs: list[str]) -> None:
        if len(self.known) >= _CACHE_LIMIT:  # Bounded: start afresh rather than grow.
            self.known.clear()
        self.known.update(refs)

    def forget(self) -> None:
        """Trust nothing cached (after a failed write, an erasure or a migration)."""
        self.known.clear()
        self.pending.clear()


def write(
    conn: Connection,
    made: Mapping[str, tuple[str | None, str]],
    stored: Stored,
    seal_with: Callable[[str | None], AESGCM | None],
) -> list[str]:
    """Insert the blobs of a batch that are not known to be stored (idempotently); returns
    the refs inserted, for `Stored.committed` once the caller has seen the batch committed.
    Refs never said committed (a batch whose transaction failed, say) stay pending, and the
    next batch probes them.

    Args:
        conn: The batch's connection, inside its write transaction.
        made: ref -> (kid, JSON text); kid `None` for a blob in clear.
        stored: The process's record of stored refs (updated: written refs are pending).
        seal_with: The cipher of a kid (`None` for clear blobs).
    """
    stored.confirm(conn)
    rows, written = [], []
    for ref, (kid, text) in made.items():
        if ref in stored.known:
            continue
        aead = seal_with(kid)
        body = compact.deflate(text) if aead is None else seal(text, ref, aead)
        rows.append({"ref": ref, "kid": kid, "body": body})
        written.append(ref)
        stored.pending.add(ref)
    if rows:
        _INSERT.run_many(conn, rows)
    return written


def load(conn: Connection, refs: Iterable[str]) -> dict[str, tuple[str | None, bytes | str]]:
    """The stored blobs of `refs`: ref -> (kid, body as stored: bytes, or text in the form
    before `0017_audit_compact`)."""
    wanted = sorted(set(refs))
    out: dict[str, tuple[str | None, bytes | str]] = {}
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        query = select(audit_blob.c.ref, audit_blob.c.kid, audit_blob.c.body).where(
            audit_blob.c.ref.in_(chunk)
        )
        for ref, kid, body in conn.execute(query):
            out[ref] = (kid, body)
    return out
