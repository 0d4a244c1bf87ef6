"""The hash chain: canonical JSON, row hashes, and the checks `verify` runs over stored rows
(frozen copy of `audit/chain.py`, with `audit.store.spliced_row_hash`, as `0014_audit_blobs`
and `0017_audit_compact` verify and relink chains).

Each conversation's rows form one chain: row `seq`'s hash covers its content and the hash
of row `seq - 1` (`prev_hash`, a stored column in the revisions these conversions run in).
Editing, deleting, inserting or reordering a row breaks the chain at that row; a truncated
tail is seen by comparing the chain's end with the conversation's head (seq and hash).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic_core import to_jsonable_python

from frontdesk.errors import AuditPayloadError

GENESIS_HASH = "0" * 64
"""The `prev_hash` of a conversation's first row."""


def _dumps(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def canonical_json(value: Any) -> str:
    """One deterministic JSON text per value: sorted keys, no spaces, no NaN.

    UTF-8 is kept readable; a string holding a lone surrogate (which UTF-8 cannot encode)
    makes the whole text ASCII-escaped, so the function stays deterministic.

    Raises:
        AuditPayloadError: when the value holds NaN/infinity or something not JSON-able.
    """
    try:
        try:
            # Payloads are plain JSON almost always; converting them first costs as much
            # as encoding them, so conversion runs only for what `json` cannot encode.
            plain = value
            text = _dumps(plain)
        except TypeError:
            plain = to_jsonable_python(value)
            text = _dumps(plain)
    except (ValueError, TypeError) as e:
        raise AuditPayloadError(
            f"audit payload is not plain JSON ({e}); pass str/int/float/bool/None, lists and"
            " dicts (pydantic models and datetimes are converted), never NaN or infinity"
        ) from e
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text


def sha256_text(text: str) -> str:
    """The hex sha256 of a text's UTF-8 bytes (a lone surrogate is encoded as-is)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class AuditRow(Protocol):
    """A stored audit row as verification reads it (the columns its hash covers)."""

    @property
    def conversation_id(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def event_id(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def turn_id(self) -> str: ...
    @property
    def created_at(self) -> str: ...
    @property
    def payload_json(self) -> str: ...
    @property
    def prompt_sha256(self) -> str | None: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def hash(self) -> str: ...


def row_hash(
    *,
    conversation_id: str,
    seq: int,
    event_id: str,
    kind: str,
    turn_id: str,
    created_at: str,
    payload: Any,
    prompt_sha256: str | None,
    prev_hash: str,
) -> str:
    """The hash of one row: sha256 of the canonical JSON of its content and its link."""
    return sha256_text(
        canonical_json(
            {
                "conversation_id": conversation_id,
                "seq": seq,
                "event_id": event_id,
                "kind": kind,
                "turn_id": turn_id,
                "created_at": created_at,
                "payload": payload,
                "prompt_sha256": prompt_sha256,
                "prev_hash": prev_hash,
            }
        )
    )


@dataclass(frozen=True)
class Head:
    """Where a conversation's chain ends: the last seq and its hash."""

    seq: int
    hash: str


ProblemKind = Literal["edited", "missing", "inserted", "relinked", "truncated", "head", "unaudited"]


@dataclass(frozen=True)
class ChainProblem:
    """The first place a conversation's chain is broken."""

    seq: int
    """The first bad row (for a truncated tail: the first missing seq)."""
    kind: ProblemKind
    detail: str


@dataclass(frozen=True)
class ConversationVerdict:
    """The result of verifying one conversation."""

    conversation_id: str
    rows: int
    problem: ChainProblem | None = None

    @property
    def ok(self) -> bool:
        """Whether the chain is intact."""
        return self.problem is None


def _content_problem(row: AuditRow, prompts: Mapping[str, str]) -> str | None:
    """Why a row's stored content does not match its hash, or `None` when it does."""
    try:
        payload = json.loads(row.payload_json)
    except ValueError:
        return "payload is not valid JSON (edited)"
    if canonical_json(payload) != row.payload_json:
        return "payload text is not in canonical form (edited)"
    if row.prompt_sha256 is not None:
        text = prompts.get(row.prompt_sha256)
        if text is None:
            return f"system prompt {row.prompt_sha256[:12]} is missing"
        if sha256_text(text) != row.prompt_sha256:
            return f"system prompt {row.prompt_sha256[:12]} was edited"
    recomputed = row_hash(
        conversation_id=row.conversation_id,
        seq=row.seq,
        event_id=row.event_id,
        kind=row.kind,
        turn_id=row.turn_id,
        created_at=row.created_at,
        payload=payload,
        prompt_sha256=row.prompt_sha256,
        prev_hash=row.prev_hash,
    )
    if recomputed != row.hash:
        return "content does not match its hash (edited, or moved from another seq)"
    return None


def _row_problem(
    row: AuditRow, expected: int, prev: str, prompts: Mapping[str, str]
) -> ChainProblem | None:
    """The problem at one row, given the seq and hash the chain expects there."""
    if row.seq < expected:
        return ChainProblem(row.seq, "inserted", f"a second row with seq {row.seq} (inserted)")
    if row.seq > expected:
        return ChainProblem(
            expected, "missing", f"row seq {expected} is missing (deleted); next is {row.seq}"
        )
    content = _content_problem(row, prompts)
    if content is not None:
        return ChainProblem(row.seq, "edited", f"row seq {row.seq}: {content}")
    if row.prev_hash != prev:
        return ChainProblem(
            row.seq,
            "relinked",
            f"row seq {row.seq} does not link to row seq {row.seq - 1}"
            " (a row was inserted, deleted or reordered before it)",
        )
    return None


def _head_problem(last: int, last_hash: str, head: Head | None, what: str) -> ChainProblem | None:
    """Compare the chain's end with a recorded head (or anchor)."""
    if head is None:
        return None
    if head.seq > last:
        return ChainProblem(
            last + 1,
            "truncated",
            f"chain ends at seq {last} but the {what} records {head.seq} rows (tail truncated)",
        )
    if head.seq == last and head.hash != last_hash:
        return ChainProblem(last, "edited", f"row seq {last} does not match the {what} hash")
    return None


def verify_chain(
    conversation_id: str,
    rows: Sequence[AuditRow],
    *,
    head: Head | None,
    prompts: Mapping[str, str],
    anchor: Head | None = None,
) -> ConversationVerdict:
    """Verify one conversation's rows (sorted by seq) against its head and optional anchor.

    Args:
        conversation_id: The conversation the rows belong to.
        rows: Its rows ordered by `seq`.
        head: The head table's record, `None` when it has none.
        prompts: System prompt texts by sha256, for the rows that reference one.
        anchor: A head recorded outside the database earlier; the chain must still hold
            that row with that hash.
    """
    prev, expected = GENESIS_HASH, 1
    hashes: dict[int, str] = {}
    for row in rows:
        problem = _row_problem(row, expected, prev, prompts)
        if problem is not None:
            return ConversationVerdict(conversation_id, len(rows), problem)
        prev, expected = row.hash, expected + 1
        hashes[row.seq] = row.hash
    last = expected - 1
    if head is None and rows:
        problem = ChainProblem(last, "head", "the head row is missing (deleted)")
        return ConversationVerdict(conversation_id, len(rows), problem)
    if head is not None and head.seq < last:
        problem = ChainProblem(
            head.seq + 1, "inserted", f"row seq {head.seq + 1} is beyond the head (inserted)"
        )
        return ConversationVerdict(conversation_id, len(rows), problem)
    problem = _head_problem(last, prev, head, "head table")
    if problem is None and anchor is not None:
        if anchor.seq > last:
            problem = _head_problem(last, prev, anchor, "anchor")
        elif hashes.get(anchor.seq) != anchor.hash:
            problem = ChainProblem(
                anchor.seq, "edited", f"row seq {anchor.seq} does not match the anchor's hash"
            )
    return ConversationVerdict(conversation_id, len(rows), problem)


def spliced_row_hash(
    *,
    conversation_id: str,
    seq: int,
    event_id: str,
    kind: str,
    turn_id: str,
    created_at: str,
    payload_json: str,
    prompt_sha256: str | None,
    prev_hash: str,
) -> str:
    """`row_hash` from the payload's canonical JSON, without parsing it again.

    The row's canonical JSON is its fields' canonical JSON (sorted keys) with the payload's
    own canonical text in its place. When a field other than the payload is not ASCII, the
    whole text might have to be ASCII-escaped (a lone surrogate in the payload), so those
    rare rows take `row_hash` itself.
    """
    fields = (conversation_id, event_id, kind, turn_id, created_at, prev_hash)
    if not all(f.isascii() for f in fields) or not (prompt_sha256 or "").isascii():
        return row_hash(
            conversation_id=conversation_id,
            seq=seq,
            event_id=event_id,
            kind=kind,
            turn_id=turn_id,
            created_at=created_at,
            payload=json.loads(payload_json),
            prompt_sha256=prompt_sha256,
            prev_hash=prev_hash,
        )
    # Keys in sorted order, as canonical_json writes them.
    head = canonical_json(
        {
            "conversation_id": conversation_id,
            "created_at": created_at,
            "event_id": event_id,
            "kind": kind,
        }
    )
    tail = canonical_json(
        {"prev_hash": prev_hash, "prompt_sha256": prompt_sha256, "seq": seq, "turn_id": turn_id}
    )
    return sha256_text(f'{head[:-1]},"payload":{payload_json},{tail[1:]}')
