"""audit: the append-only, hash-chained record of every expert call and turn decision.

`AuditLog` stores and verifies it; `build_transcript` reads it back as turns and calls;
`cost_report`, `render_html` / `write_jsonl` and `replay_transcript` serve the ops commands
(`frontdesk audit show|export|verify|cost|replay`). The package imports neither `experts`
nor `orchestrator`.
"""

from frontdesk.audit.chain import ChainProblem, ConversationVerdict, Head, VerifyReport
from frontdesk.audit.cost import CostLine, CostReport, cost_report
from frontdesk.audit.events import AuditEvent, EventKind
from frontdesk.audit.export import IndexEntry, render_html, render_index, write_jsonl
from frontdesk.audit.pricing import PRICES, Cost, Price, cost_of, price_of
from frontdesk.audit.redaction import recorded_rules, redact_rows, ruled_values
from frontdesk.audit.replay import (
    RecordedTurn,
    ReplayReport,
    ReplayResult,
    TurnDiff,
    TurnRunner,
    replay_transcript,
)
from frontdesk.audit.store import AuditLog, StoredAuditEvent
from frontdesk.audit.transcript import ExpertCall, Transcript, TurnView, build_transcript
from frontdesk.errors import (
    AuditConfigError,
    AuditError,
    AuditPayloadError,
    AuditWriteError,
    ReplayError,
    UnknownConversation,
)

__all__ = [
    "PRICES",
    "AuditConfigError",
    "AuditError",
    "AuditEvent",
    "AuditLog",
    "AuditPayloadError",
    "AuditWriteError",
    "ChainProblem",
    "ConversationVerdict",
    "Cost",
    "CostLine",
    "CostReport",
    "EventKind",
    "ExpertCall",
    "Head",
    "IndexEntry",
    "Price",
    "RecordedTurn",
    "ReplayError",
    "ReplayReport",
    "ReplayResult",
    "StoredAuditEvent",
    "Transcript",
    "TurnDiff",
    "TurnRunner",
    "TurnView",
    "UnknownConversation",
    "VerifyReport",
    "build_transcript",
    "cost_of",
    "cost_report",
    "price_of",
    "recorded_rules",
    "redact_rows",
    "render_html",
    "render_index",
    "replay_transcript",
    "ruled_values",
    "write_jsonl",
]
