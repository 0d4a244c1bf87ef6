"""A warm turn's start and finish as one call each to the server's own functions
(PostgreSQL, revision `0031_turn_functions`, the finish as `0036_later_handoff` left it):
the SQL of `ConversationStore.start_turn`'s and `finish_turn`'s usual case, run where the
rows are, in one round trip each instead of twelve and nine.

The store decides when (`frontdesk.db.one_call_turns`: the database has the functions)
and falls back to its general start, the one that knows every case, whenever the function
refuses (`Fallback`: nothing of the call was kept).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError

from frontdesk._driver import Statement
from frontdesk.threads._outcomes import Previous, last_question
from frontdesk.threads._path_cache import KnownPath, plus
from frontdesk.threads._records import MessageRecord
from frontdesk.threads.handoff import Opened
from frontdesk.threads.models import Message, UTCDateTime
from frontdesk.threads.summaries import PathSinceSummary, Summary, SummaryRecord, depth_of

__all__ = [
    "FALLBACK",
    "AlsoAhead",
    "AuditRows",
    "Fallback",
    "StartedOnServer",
    "finish",
    "start",
]

FALLBACK = "FD001"
"""The SQLSTATE the functions raise for "not the usual turn" (revision 0031)."""

_msg = Message.__table__  # type: ignore[attr-defined]
_summary = Summary.__table__  # type: ignore[attr-defined]


class Fallback(Exception):
    """The function refused (an unusual turn): run the general path; nothing was kept."""


@contextlib.contextmanager
def _refusal_as_fallback() -> Iterator[None]:
    """The functions' refusal (SQLSTATE `FALLBACK`) raised as `Fallback`."""
    try:
        yield
    except DBAPIError as e:
        if getattr(e.orig, "sqlstate", None) == FALLBACK:
            raise Fallback(str(e.orig)) from None
        raise


def _function_call(
    select: str,
    arguments: Mapping[str, Any],
    columns: Sequence[Any],
    *,
    as_json: Collection[str] = (),
) -> Any:
    """`SELECT {select}` of a server function's call: `select` holds `{call}`, where the
    call's arguments go, one bind each of its type, in `arguments`' order (the function's
    own); those in `as_json` go as JSON text cast to `json`. Its rows read as `columns`."""
    binds = [sa.bindparam(name, type_=kind) for name, kind in arguments.items()]
    call = ", ".join(f"CAST(:{b.key} AS json)" if b.key in as_json else f":{b.key}" for b in binds)
    return sa.text(f"SELECT {select.format(call=call)}").bindparams(*binds).columns(*columns)


_START_ARGUMENTS: dict[str, Any] = {
    "lease_name": sa.String,
    "lease_owner": sa.String,
    "lease_expires": sa.Float,
    "lease_now": sa.Float,
    "new_id": sa.String,
    "conversation_id": sa.String,
    "content": sa.Text,
    "created_at": UTCDateTime,
    "token_count": sa.Integer,
    "client_message_id": sa.String,
    "user_id": sa.String,
    "profile": sa.String,
    "check_handoff": sa.Boolean,
    "known_leaf": sa.String,
    "known_version": sa.Integer,
    "known_previous": sa.String,
}
# `frontdesk_start_turn`'s columns beside its two row columns.
_START_EXTRA: dict[str, Any] = {
    "lease_token": sa.BigInteger,
    "previous_id": sa.String,
    "previous_category": sa.String,
    "previous_confirmation": sa.JSON,
    "previous_flow": sa.JSON,
    "path_version": sa.Integer,
    "path_known": sa.Boolean,
}


def _start_statement() -> Any:
    """`SELECT` of `frontdesk_start_turn`'s rows, its two row columns spread out (the
    summary's as `summary_<column>`, as `path_since_newest_sync` reads them)."""
    spread = [(f"(r.m).{c.name}", c.name, c.type) for c in _msg.c]
    spread += [(f"(r.s).{c.name}", f"summary_{c.name}", c.type) for c in _summary.c]
    spread += [(f"r.{name}", name, kind) for name, kind in _START_EXTRA.items()]
    select = ", ".join(f"{value} AS {name}" for value, name, _ in spread)
    columns = [sa.column(name, kind) for _, name, kind in spread]
    return _function_call(
        f"{select} FROM frontdesk_start_turn({{call}}) AS r", _START_ARGUMENTS, columns
    )


_START = Statement(_start_statement(), sqlite=False)


class StartedOnServer:
    """What `frontdesk_start_turn` wrote and read: the new message, its path, the turn
    before on that path, the conversation's `path_version` under its lock, and whether the
    caller's known path was still the path (`path_known`: the function sent no path)."""

    __slots__ = ("message", "path", "path_known", "previous", "version")

    def __init__(
        self,
        message: MessageRecord,
        path: PathSinceSummary,
        previous: Previous | None,
        *,
        version: int,
        path_known: bool,
    ) -> None:
        self.message = message
        self.path = path
        self.previous = previous
        self.version = version
        self.path_known = path_known


def start(
    conn: Connection,
    claim: dict[str, Any],
    *,
    message: MessageRecord,
    user_id: str | None,
    profile: str | None,
    check_handoff: bool,
    known: KnownPath | None = None,
) -> tuple[int | None, StartedOnServer | None]:
    """One call, its own transaction: take the lease of `claim` (`TurnLease.claim`), add
    `message` (its id, text, time and client id; its parent is the conversation's leaf)
    and read its path, unless `known` (the path this process kept) is still the path to
    that leaf at its version (revision 0038). Returns the fencing token and what was done,
    or `(None, None)` when another owner holds the lease (nothing written).

    Raises:
        Fallback: not the usual start (see revision 0031); nothing was written.
    """
    params = {
        **claim,
        "new_id": message.id,
        "conversation_id": message.conversation_id,
        "content": message.content,
        "created_at": message.created_at,
        "token_count": message.token_count,
        "client_message_id": message.client_message_id,
        "user_id": user_id,
        "profile": profile,
        "check_handoff": check_handoff,
        "known_leaf": None if known is None else known.leaf_id,
        "known_version": None if known is None else known.version,
        "known_previous": _known_previous(known),
    }
    with _refusal_as_fallback():
        rows = _START.rows(conn, params)
    if not rows:
        return None, None
    top, last = rows[0], rows[-1]
    if last["path_known"]:
        assert known is not None, "the function reuses only a path it was told"
        path = plus(known.path, MessageRecord.from_row(last))
    elif top["summary_id"] is None:
        path = PathSinceSummary(
            summary=None, messages=[MessageRecord.from_row(r) for r in rows], replaced=0
        )
    else:
        summary = SummaryRecord.from_row({c.name: top[f"summary_{c.name}"] for c in _summary.c})
        replaced = summary.covered_messages
        if replaced is None:  # A summary written before the count was kept.
            replaced = depth_of(conn, top["id"])
        path = PathSinceSummary(
            summary=summary,
            messages=[MessageRecord.from_row(r) for r in rows[1:]],
            replaced=replaced,
        )
    previous = None
    if last["previous_id"] is not None:
        previous = Previous(
            user_message_id=last["previous_id"],
            category=last["previous_category"],
            confirmation=last["previous_confirmation"],
            flow=last["previous_flow"],
        )
    started = StartedOnServer(
        path.messages[-1],
        path,
        previous,
        version=int(last["path_version"]),
        path_known=bool(last["path_known"]),
    )
    return int(last["lease_token"]), started


def _known_previous(known: KnownPath | None) -> str | None:
    """The id of the turn before a message written under `known`'s leaf, if any."""
    question = None if known is None else last_question(known.path.messages)
    return None if question is None else question.id


class AuditRows(Protocol):
    """A turn's audit batch, chained and packed before its last transaction (made by the
    audit log: `frontdesk.audit.store.Ahead`)."""

    @property
    def conversation_id(self) -> str: ...
    @property
    def head_seq(self) -> int: ...
    @property
    def head_hash(self) -> str: ...
    @property
    def events(self) -> list[dict[str, Any]]: ...
    @property
    def blobs(self) -> list[dict[str, Any]]: ...


@runtime_checkable
class AlsoAhead(Protocol):
    """A finish's `also` that can give its audit rows before the transaction (`ahead`:
    `None` when it cannot), so the whole finish is one call."""

    def __call__(self, conn: Connection, opened: Opened | None) -> None: ...
    def ahead(self, opened: Opened | None) -> AuditRows | None: ...


_ARRAYS = {
    "blob_refs": sa.String,
    "blob_kids": sa.String,
    "blob_bodies": sa.LargeBinary,
    "event_seqs": sa.Integer,
    "event_ids": sa.LargeBinary,
    "event_kinds": sa.String,
    "event_turns": sa.LargeBinary,
    "event_times": sa.LargeBinary,
    "event_payloads": sa.LargeBinary,
    "event_prompts": sa.LargeBinary,
    "event_hashes": sa.LargeBinary,
}
_EVENT_COLUMNS = {
    "event_seqs": "seq",
    "event_ids": "event_id",
    "event_kinds": "kind",
    "event_turns": "turn_id",
    "event_times": "created_at",
    "event_payloads": "payload_json",
    "event_prompts": "prompt_sha256",
    "event_hashes": "hash",
}


_FINISH_ARGUMENTS: dict[str, Any] = {
    "lease_name": sa.String,
    "lease_owner": sa.String,
    "lease_token": sa.BigInteger,
    "outcome": sa.Text,
    "reply": sa.Text,
    "audit_conversation": sa.String,
    "audit_seq": sa.Integer,
    "audit_hash": sa.String,
    **{name: postgresql.ARRAY(kind) for name, kind in _ARRAYS.items()},
}


def _finish_statement() -> Any:
    # The outcome and the reply go as JSON text, made rows by the function
    # (`json_populate_record`): the tables' own columns, whatever they are.
    return _function_call(
        "frontdesk_finish_turn({call}) AS held",
        _FINISH_ARGUMENTS,
        [sa.column("held", sa.Boolean)],
        as_json=("outcome", "reply"),
    )


_FINISH = Statement(_finish_statement(), sqlite=False)


def finish(
    conn: Connection,
    fence: dict[str, Any],
    *,
    reply: MessageRecord,
    outcome: dict[str, Any] | None,
    audit: AuditRows | None,
) -> bool:
    """One call, its own transaction: behind the lease's fence (`fence`: its name, owner
    and token), given back with it, store `outcome` (the row's values; its usage when one
    is stored), `reply` as the new leaf, and the audit rows. Returns whether the lease
    held (when not, nothing was written).

    Raises:
        Fallback: not the usual finish (a failed-turn marker to supersede, an audit head
            moved, an outcome that hands off: revision 0036); nothing was written.
    """
    params: dict[str, Any] = {
        **fence,
        "outcome": None if outcome is None else json.dumps(outcome, default=_jsonable),
        "reply": json.dumps(
            {name: getattr(reply, name) for name in MessageRecord.__slots__}, default=_jsonable
        ),
        "audit_conversation": None if audit is None else audit.conversation_id,
        "audit_seq": None if audit is None else audit.head_seq,
        "audit_hash": None if audit is None else audit.head_hash,
    }
    blobs = [] if audit is None else audit.blobs
    events = [] if audit is None else audit.events
    params["blob_refs"] = [b["ref"] for b in blobs]
    params["blob_kids"] = [b["kid"] for b in blobs]
    params["blob_bodies"] = [b["body"] for b in blobs]
    for name, column in _EVENT_COLUMNS.items():
        params[name] = [e[column] for e in events]
    with _refusal_as_fallback():
        row = _FINISH.first(conn, params)
    return row is not None and bool(row["held"])


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")
