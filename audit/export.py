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

from frontdesk.audit.redaction import redact_rows
from frontdesk.audit.store import StoredAuditEvent
from frontdesk.audit.transcript import ExpertCall, Transcript, TurnView
from frontdesk.redaction import Redactor
from frontdesk.ruled import RuledValues


def event_record(row: StoredAuditEvent, *, redacted: bool = False) -> dict[str, Any]:
    """One stored row as a JSON object, with its place in the chain.

    A row from `redact_rows` is marked `"redacted": true`: its payload is not the one the
    stored `hash` covers, so it is checked against the database, not against itself.
    """
    record = {
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
    if redacted:
        record["redacted"] = True
    return record


def write_jsonl(
    rows: Iterable[StoredAuditEvent],
    out: IO[str],
    *,
    redactor: Redactor | None = None,
    ruled: RuledValues | None = None,
) -> int:
    """Write one JSON line per row; returns the number of lines.

    Args:
        rows: one conversation's rows, in seq order.
        out: where to write.
        redactor: when given, the rows are written as `redact_rows` shows them, each marked
            `"redacted": true`; without one they are written as stored.
    """
    if redactor is not None:
        rows = redact_rows(list(rows), redactor, ruled=ruled)
    n = 0
    for row in rows:
        record = event_record(row, redacted=redactor is not None)
        out.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        n += 1
    return n


CHART_WIDTH, CHART_HEIGHT = 640, 178
PLOT_LEFT, PLOT_BOTTOM, PLOT_TOP = 28, 30, 22
"""Room for the rotated unit and the 0 on the left, the axis maximum above the plot (it
starts at the axis and runs right, so however long it is it stays in the picture), the
turn numbers and the x-axis title below."""
WAIT_COLOUR = "#8a8f9c"
EXPERT_COLOURS = {
    "triage": "#5b7bd5",
    "request": "#e0913a",
    "response": "#3f9e63",
    "summariser": "#9b59b6",
}


@dataclass(frozen=True)
class Segment:
    """One expert's part of one turn's bar, in SVG units."""

    x: float
    y: float
    width: float
    height: float
    colour: str
    title: str


@dataclass(frozen=True)
class Chart:
    """One metric per turn, a bar per turn stacked by expert, with labelled axes."""

    title: str
    unit: str
    top: float
    """The y-axis maximum, in `unit`."""
    segments: list[Segment]
    ticks: list[tuple[float, str]]
    """x positions and labels of the turns (`#1`, `#2`, ...)."""
    marks: list[tuple[float, float, float, str]]
    """Optional per-turn markers (x1, x2, y, title): the turn's wall-clock time."""
    experts: list[tuple[str, str]]
    """The legend: (expert, colour)."""


def _metric(call: ExpertCall, name: str) -> float:
    if name == "tokens":
        return float(call.tokens.total)
    if name == "cost":
        return call.cost.usd
    return call.latency_ms


def _format(value: float, unit: str) -> str:
    if unit == "USD":
        return f"${value:.6f}"
    return f"{value:,.0f} {unit}"


def charts(turns: Sequence[TurnView]) -> list[Chart]:
    """Tokens, cost and latency per expert per turn; latency also marks each turn's
    wall-clock time, which includes the waits between retried attempts."""
    if not turns:
        return []
    experts = sorted(
        {c.expert for t in turns for c in t.calls},
        key=lambda e: (list(EXPERT_COLOURS).index(e) if e in EXPERT_COLOURS else 99, e),
    )
    legend = [(e, EXPERT_COLOURS.get(e, "#888888")) for e in experts]
    colours = dict(legend)
    plot_width = CHART_WIDTH - PLOT_LEFT - 8
    plot_height = CHART_HEIGHT - PLOT_BOTTOM - PLOT_TOP
    slot = plot_width / len(turns)
    out = []
    for name, title, unit in (
        ("tokens", "Tokens per turn, by expert", "tokens"),
        ("cost", "Cost per turn, by expert", "USD"),
        (
            "latency",
            "Latency per turn: model time by expert; the line is the system's wall-clock"
            " time (a person's wait in a hand-off is not in it: see the chart below)",
            "ms",
        ),
    ):
        totals = [sum(_metric(c, name) for c in t.calls) for t in turns]
        if name == "latency":
            totals = [max(total, t.working_ms) for total, t in zip(totals, turns, strict=True)]
        top = max(totals) or 1.0
        scale = plot_height / top
        base_y = CHART_HEIGHT - PLOT_BOTTOM
        segments, marks, ticks = [], [], []
        for i, turn in enumerate(turns):
            x = PLOT_LEFT + i * slot + slot * 0.15
            width = slot * 0.7
            y = float(base_y)
            for call in turn.calls:
                value = _metric(call, name)
                height = value * scale
                y -= height
                segments.append(
                    Segment(
                        x, y, width, height, colours[call.expert],
                        f"turn {i + 1} {call.expert}: {_format(value, unit)}",
                    )
                )  # fmt: skip
            if i % _tick_step(len(turns)) == 0 or i == len(turns) - 1:
                ticks.append((x + width / 2, f"#{i + 1}"))
            if name == "latency":
                wall_y = base_y - turn.working_ms * scale
                title_text = (
                    f"turn {i + 1} wall-clock (with retry waits, without a person's wait):"
                    f" {turn.working_ms:,.0f} ms"
                )
                marks.append((x - 2, x + width + 2, wall_y, title_text))
        out.append(Chart(title, unit, top, segments, ticks, marks, legend))
    if any(t.waited_ms > 0 for t in turns):
        out.append(_waits(turns, slot, plot_height))
    return out


def _tick_step(turns: int) -> int:
    """Label every n-th turn so that at most about 20 labels share the axis."""
    return max(1, -(-turns // 20))


def _waits(turns: Sequence[TurnView], slot: float, plot_height: float) -> Chart:
    """The time users waited for a person (hand-offs), a series of its own: it is minutes
    where model time is milliseconds, and nobody's latency to tune."""
    top = max(t.waited_ms for t in turns) or 1.0
    scale, base_y = plot_height / top, CHART_HEIGHT - PLOT_BOTTOM
    segments, ticks = [], []
    for i, turn in enumerate(turns):
        x, width = PLOT_LEFT + i * slot + slot * 0.15, slot * 0.7
        height = turn.waited_ms * scale
        title = f"turn {i + 1} waiting for a person: {turn.waited_ms:,.0f} ms"
        segments.append(Segment(x, base_y - height, width, height, WAIT_COLOUR, title))
        if i % _tick_step(len(turns)) == 0 or i == len(turns) - 1:
            ticks.append((x + width / 2, f"#{i + 1}"))
    return Chart(
        "A person's waiting time per turn (hand-off): the user waited, no model ran",
        "ms",
        top,
        segments,
        ticks,
        [],
        [("waiting for a person", WAIT_COLOUR)],
    )


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


def render_html(
    transcripts: Sequence[Transcript], *, title: str = "frontdesk audit", redacted: bool = False
) -> str:
    """The self-contained HTML page for one or more conversations.

    Args:
        transcripts: what to show.
        title: the page's title.
        redacted: whether the transcripts were built from `redact_rows` (the page says so).
    """
    template = _environment().get_template("transcript.html.j2")
    return template.render(
        title=title,
        redacted=redacted,
        transcripts=transcripts,
        charts=charts,
        format_value=_format,
        chart_width=CHART_WIDTH,
        chart_height=CHART_HEIGHT,
        plot_left=PLOT_LEFT,
        plot_bottom=PLOT_BOTTOM,
        plot_top=PLOT_TOP,
    )


@dataclass(frozen=True)
class IndexEntry:
    """One conversation's line on the index page of an `export --all --format html`."""

    conversation_id: str
    href: str
    """Its page, relative to the index."""
    turns: int
    cost_usd: float
    cost_known: bool
    """False when a model's price is unknown (counted as $0)."""
    verified: bool
    problem: str | None = None
    """Why its chain does not verify."""


def render_index(
    entries: Sequence[IndexEntry], *, title: str = "frontdesk audit", redacted: bool = False
) -> str:
    """The index page linking every exported conversation's page, with its turn count,
    its cost and whether its chain verifies."""
    template = _environment().get_template("index.html.j2")
    return template.render(
        title=title,
        entries=entries,
        redacted=redacted,
        failing=sum(1 for e in entries if not e.verified),
        total_usd=sum(e.cost_usd for e in entries),
    )
