"""Exports for people and tools: JSONL (one row per event) and one self-contained HTML page.

The HTML page has no external resource at all (inline CSS, JS and SVG), so an ops person
can open it from a ticket attachment; jinja2 escapes every value, so a model reply holding
`<script>` is shown as text, never run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Any

from jinja2 import Environment, PackageLoader, select_autoescape

from frontdesk.audit.store import StoredAuditEvent
from frontdesk.audit.transcript import Transcript, TurnView


def event_record(row: StoredAuditEvent) -> dict[str, Any]:
    """One stored row as a JSON object, with its place in the chain."""
    return {
        "conversation_id": row.conversation_id,
        "seq": row.seq,
        "event_id": row.event_id,
        "kind": row.kind,
        "turn_id": row.turn_id,
        "created_at": row.created_at,
        "payload": row.payload,
        "system_prompt": row.system_prompt,
        "prompt_sha256": row.prompt_sha256,
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }


def write_jsonl(rows: Iterable[StoredAuditEvent], out: IO[str]) -> int:
    """Write one JSON line per row; returns the number of lines."""
    n = 0
    for row in rows:
        out.write(json.dumps(event_record(row), ensure_ascii=False, sort_keys=True) + "\n")
        n += 1
    return n


@dataclass(frozen=True)
class Bar:
    """One bar of the tokens-per-turn chart, in SVG units."""

    x: float
    y: float
    width: float
    height: float
    label: str
    value: int
    title: str


CHART_WIDTH, CHART_HEIGHT = 640, 160


def token_bars(turns: Sequence[TurnView]) -> list[Bar]:
    """Bars of total tokens per turn, scaled to the chart."""
    if not turns:
        return []
    top = max(t.tokens.total for t in turns) or 1
    slot = CHART_WIDTH / len(turns)
    bars = []
    for i, turn in enumerate(turns):
        height = (CHART_HEIGHT - 32) * turn.tokens.total / top
        bars.append(
            Bar(
                x=i * slot + slot * 0.15,
                y=CHART_HEIGHT - 16 - height,
                width=slot * 0.7,
                height=height,
                label=f"#{i + 1}",
                value=turn.tokens.total,
                title=f"turn {i + 1}: {turn.tokens.total} tokens "
                f"({turn.tokens.cache_read} cache read)",
            )
        )
    return bars


def _pretty(value: Any) -> str:
    """Indented JSON (or the text itself) for <pre> blocks."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("frontdesk.audit", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = _pretty
    return env


def render_html(transcripts: Sequence[Transcript], *, title: str = "frontdesk audit") -> str:
    """The self-contained HTML page for one or more conversations."""
    template = _environment().get_template("transcript.html.j2")
    return template.render(
        title=title,
        transcripts=transcripts,
        token_bars=token_bars,
        chart_width=CHART_WIDTH,
        chart_height=CHART_HEIGHT,
    )
