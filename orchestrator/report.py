"""Did it help, for a period: `frontdesk report` (docs/outcomes.md).

Per category, per day (and per prompt variant): conversations, resolution rate (confirmed
by the customer, a handler or an operator; assumed after `assume_after`), containment
(resolved without a person), hand-off rate and median wait for a person, average rating
and comments, turns per conversation, failed turns, and the model cost per conversation
and per resolution (each turn's usage, as the audit recorded it, priced by
`audit/pricing.py`). The facts are read a page of conversations at a time
(`threads/report.py`); only the groups' sums are kept.
"""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from frontdesk.audit.pricing import cost_of
from frontdesk.threads.report import ConversationFacts, conversation_facts, count_in_period
from frontdesk.threads.store import ConversationStore

__all__ = ["Line", "Report", "build_report", "render_html", "two_proportion_p"]

NO_CATEGORY = "(none)"
"""The category of a conversation no turn of which was routed (all failed, or empty)."""


@dataclass
class Line:
    """The figures of one group of conversations (a category, a day, a variant, all)."""

    label: str
    conversations: int = 0
    resolved: int = 0
    """Confirmed: by the customer, a handler or an operator."""
    assumed: int = 0
    """No further message within `assume_after` of a bot answer."""
    abandoned: int = 0
    handed_off: int = 0
    contained: int = 0
    """Resolved (confirmed or assumed) and never handed to a person."""
    waits: list[float] = field(default_factory=list)
    rating_sum: int = 0
    ratings: int = 0
    comments: int = 0
    turns: int = 0
    failed_turns: int = 0
    cost_usd: float = 0.0

    def add(self, fact: ConversationFacts, usd: float) -> None:
        """Count one conversation."""
        self.conversations += 1
        self.resolved += fact.resolution == "resolved"
        self.assumed += fact.resolution == "assumed_resolved"
        self.abandoned += fact.resolution == "abandoned"
        self.handed_off += fact.handed_off
        self.contained += (
            fact.resolution in ("resolved", "assumed_resolved") and not fact.handed_off
        )
        self.waits.extend(fact.waits)
        self.rating_sum += sum(fact.ratings)
        self.ratings += len(fact.ratings)
        self.comments += fact.comments
        self.turns += fact.turns
        self.failed_turns += fact.failed
        self.cost_usd += usd

    def _rate(self, count: int) -> float | None:
        return None if self.conversations == 0 else count / self.conversations

    def as_json(self) -> dict[str, Any]:
        """The line's counts and the rates derived from them."""
        resolutions = self.resolved + self.assumed
        return {
            "label": self.label,
            "conversations": self.conversations,
            "resolved": self.resolved,
            "assumed_resolved": self.assumed,
            "abandoned": self.abandoned,
            "handed_off": self.handed_off,
            "contained": self.contained,
            "resolution_rate": self._rate(resolutions),
            "confirmed_rate": self._rate(self.resolved),
            "assumed_rate": self._rate(self.assumed),
            "containment": self._rate(self.contained),
            "handoff_rate": self._rate(self.handed_off),
            "median_wait_seconds": statistics.median(self.waits) if self.waits else None,
            "ratings": self.ratings,
            "average_rating": self.rating_sum / self.ratings if self.ratings else None,
            "comments": self.comments,
            "turns": self.turns,
            "turns_per_conversation": self._rate(self.turns),
            "failed_turns": self.failed_turns,
            "cost_usd": round(self.cost_usd, 10),
            "cost_per_conversation": None
            if self.conversations == 0
            else round(self.cost_usd / self.conversations, 10),
            "cost_per_resolution": None
            if resolutions == 0
            else round(self.cost_usd / resolutions, 10),
        }


@dataclass
class Report:
    """The figures of a period: in all, per category, per day, per variant."""

    since: datetime | None
    until: datetime | None
    profile: str | None = None
    """Only the conversations of this profile (`None`: every one)."""
    total: Line = field(default_factory=lambda: Line("all"))
    by_category: dict[str, Line] = field(default_factory=dict)
    by_day: dict[str, Line] = field(default_factory=dict)
    by_variant: dict[str, Line] | None = None
    unknown_models: set[str] = field(default_factory=set)
    """Models the price table does not list: priced 0, so the cost is a lower bound."""

    def add(self, fact: ConversationFacts) -> None:
        """Count one conversation in every group it belongs to."""
        usd = 0.0
        for call in fact.calls:
            u = call.usage
            cost = cost_of(
                call.model,
                input_tokens=int(u.get("input_tokens", 0)),
                output_tokens=int(u.get("output_tokens", 0)),
                cache_read_tokens=int(u.get("cache_read_tokens", 0)),
                cache_write_tokens=int(u.get("cache_write_tokens", 0)),
            )
            usd += cost.usd
            if not cost.known:
                self.unknown_models.add(call.model)
        category = fact.category or NO_CATEGORY
        day = fact.created_at.date().isoformat()
        self.total.add(fact, usd)
        self.by_category.setdefault(category, Line(category)).add(fact, usd)
        self.by_day.setdefault(day, Line(day)).add(fact, usd)
        if self.by_variant is not None:
            variant = fact.variant or "(none)"
            self.by_variant.setdefault(variant, Line(variant)).add(fact, usd)

    def comparison(self) -> list[dict[str, Any]]:
        """Each variant against the first (by name): resolution counts and the two-sided
        p-value of a two-proportion z-test on the resolution rate."""
        if not self.by_variant:
            return []
        names = sorted(self.by_variant)
        base = self.by_variant[names[0]]
        rows = []
        for name in names[1:]:
            other = self.by_variant[name]
            rows.append(
                {
                    "a": base.label,
                    "b": other.label,
                    "a_resolved": base.resolved + base.assumed,
                    "a_conversations": base.conversations,
                    "b_resolved": other.resolved + other.assumed,
                    "b_conversations": other.conversations,
                    "p_value": two_proportion_p(
                        base.resolved + base.assumed,
                        base.conversations,
                        other.resolved + other.assumed,
                        other.conversations,
                    ),
                }
            )
        return rows

    def as_json(self) -> dict[str, Any]:
        """The whole report as JSON values (`--json`)."""
        doc: dict[str, Any] = {
            "since": None if self.since is None else self.since.isoformat(),
            "until": None if self.until is None else self.until.isoformat(),
            "profile": self.profile,
            "total": self.total.as_json(),
            "by_category": [line.as_json() for _, line in sorted(self.by_category.items())],
            "by_day": [line.as_json() for _, line in sorted(self.by_day.items())],
            "unknown_models": sorted(self.unknown_models),
        }
        if self.by_variant is not None:
            doc["by_variant"] = [line.as_json() for _, line in sorted(self.by_variant.items())]
            doc["variant_comparison"] = self.comparison()
        return doc


def two_proportion_p(x1: int, n1: int, x2: int, n2: int) -> float | None:
    """The two-sided p-value of a two-proportion z-test (pooled), or `None` when a group
    is empty or every conversation of both went the same way (no variance to test)."""
    if n1 == 0 or n2 == 0:
        return None
    pooled = (x1 + x2) / (n1 + n2)
    spread = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if spread == 0:
        return None
    z = (x1 / n1 - x2 / n2) / spread
    return math.erfc(abs(z) / math.sqrt(2))


async def build_report(
    store: ConversationStore,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    profile: str | None = None,
    by_variant: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """The report of the conversations begun in [since, until) (of `profile`, when
    named), read a page at a time; `progress(done, total)` after each page."""
    engine = store.engine
    report = Report(
        since=since, until=until, profile=profile, by_variant={} if by_variant else None
    )
    total = await count_in_period(engine, since, until, profile) if progress is not None else 0
    done = 0
    pages = conversation_facts(
        engine, since=since, until=until, profile=profile, variants=by_variant
    )
    async for page in pages:
        for fact in page:
            report.add(fact)
        done += len(page)
        if progress is not None:
            progress(done, total)
    return report


# -- HTML --------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _bars(title: str, rows: Iterable[tuple[str, float, str]], *, colour: str = "#3a6ea5") -> str:
    """A horizontal bar chart as plain SVG: one bar per (label, value, shown text)."""
    items = list(rows)
    if not items:
        return ""
    top = max((v for _, v, _ in items), default=0.0) or 1.0
    height = 24 * len(items) + 30
    parts = [
        f'<svg role="img" aria-label="{html.escape(title)}" width="640" height="{height}"'
        ' xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="12">',
        f'<text x="0" y="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for n, (label, value, shown) in enumerate(items):
        y = 24 + 24 * n
        width = 380 * value / top
        parts.append(f'<text x="0" y="{y + 14}">{html.escape(label[:28])}</text>')
        parts.append(
            f'<rect x="180" y="{y}" width="{width:.1f}" height="18" fill="{colour}"></rect>'
        )
        parts.append(f'<text x="{186 + width:.1f}" y="{y + 14}">{html.escape(shown)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _days_chart(by_day: Mapping[str, Line]) -> str:
    """Conversations per day as columns, the resolved share of each darker."""
    days = sorted(by_day.items())
    if not days:
        return ""
    top = max(line.conversations for _, line in days) or 1
    width = max(640, 22 * len(days) + 60)
    parts = [
        f'<svg role="img" aria-label="Conversations per day, resolved darker" width="{width}"'
        ' height="260" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif"'
        ' font-size="11">',
        '<text x="0" y="14" font-weight="bold">Conversations per day'
        " (dark: resolved, confirmed or assumed)</text>",
        f'<text x="0" y="40">{top}</text><text x="0" y="230">0</text>',
    ]
    for n, (day, line) in enumerate(days):
        x = 40 + 22 * n
        h = 190 * line.conversations / top
        r = 190 * (line.resolved + line.assumed) / top
        parts.append(
            f'<rect x="{x}" y="{225 - h:.1f}" width="16" height="{h:.1f}" fill="#b8cce4">'
            f"<title>{html.escape(day)}: {line.conversations} conversations</title></rect>"
        )
        parts.append(
            f'<rect x="{x}" y="{225 - r:.1f}" width="16" height="{r:.1f}" fill="#2e5c8a"></rect>'
        )
        if n % max(1, len(days) // 10) == 0:
            parts.append(f'<text x="{x}" y="245">{html.escape(day[5:])}</text>')
    parts.append("</svg>")
    return "".join(parts)


_COLUMNS = (
    ("conversations", "Conversations", str),
    ("resolution_rate", "Resolved", _pct),
    ("confirmed_rate", "confirmed", _pct),
    ("assumed_rate", "assumed", _pct),
    ("containment", "Containment", _pct),
    ("handoff_rate", "Hand-offs", _pct),
    ("median_wait_seconds", "Median wait (s)", _num),
    ("average_rating", "Rating", lambda v: _num(v, 2)),
    ("comments", "Comments", str),
    ("turns_per_conversation", "Turns/conv.", _num),
    ("failed_turns", "Failed turns", str),
    ("cost_per_conversation", "Cost/conv.", _usd),
    ("cost_per_resolution", "Cost/resolution", _usd),
)


def _table(title: str, lines: Iterable[dict[str, Any]]) -> str:
    head = "".join(f"<th>{html.escape(name)}</th>" for _, name, _ in _COLUMNS)
    body = []
    for line in lines:
        cells = "".join(
            f"<td>{html.escape(show(line[key]) if line[key] is not None else '-')}</td>"
            for key, _, show in _COLUMNS
        )
        body.append(f"<tr><th>{html.escape(str(line['label']))}</th>{cells}</tr>")
    return (
        f"<h2>{html.escape(title)}</h2><table><thead><tr><th></th>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def render_html(report: Report) -> str:
    """The report as one self-contained HTML page: the headline figures, plain SVG charts
    (no script), and the tables."""
    doc = report.as_json()
    t = doc["total"]
    period = f"{doc['since'] or 'the beginning'} to {doc['until'] or 'now'}"
    if doc["profile"] is not None:
        period += f", profile {doc['profile']}"
    tiles = [
        ("Conversations", str(t["conversations"])),
        ("Resolved", _pct(t["resolution_rate"])),
        ("Containment", _pct(t["containment"])),
        ("Hand-offs", _pct(t["handoff_rate"])),
        ("Average rating", _num(t["average_rating"], 2)),
        ("Cost per resolution", _usd(t["cost_per_resolution"])),
    ]
    categories = [line for line in report.by_category.values() if line.conversations]
    charts = [
        _days_chart(report.by_day),
        _bars(
            "Resolution rate per category",
            (
                (
                    line.label,
                    (line.resolved + line.assumed) / line.conversations,
                    _pct((line.resolved + line.assumed) / line.conversations),
                )
                for line in sorted(categories, key=lambda x: x.label)
            ),
        ),
        _bars(
            "Cost per resolution per category (USD)",
            (
                (line.label, line.cost_usd / r, _usd(line.cost_usd / r))
                for line in sorted(categories, key=lambda x: x.label)
                if (r := line.resolved + line.assumed)
            ),
            colour="#a5573a",
        ),
    ]
    sections = [
        _table("Per category", doc["by_category"]),
        _table("Per day", doc["by_day"]),
    ]
    if report.by_variant is not None:
        sections.append(_table("Per prompt variant", doc["by_variant"]))
        rows = "".join(
            f"<li>{html.escape(c['a'])} {c['a_resolved']}/{c['a_conversations']} resolved vs "
            f"{html.escape(c['b'])} {c['b_resolved']}/{c['b_conversations']}: p = "
            f"{'-' if c['p_value'] is None else format(c['p_value'], '.4f')}</li>"
            for c in doc["variant_comparison"]
        )
        sections.append(
            "<p>Two-proportion z-test on the resolution rate; p below 0.05 suggests a real"
            f" difference.</p><ul>{rows}</ul>"
        )
    note = ""
    if doc["unknown_models"]:
        note = (
            "<p><strong>Cost is a lower bound:</strong> the price table lists no price for "
            + html.escape(", ".join(doc["unknown_models"]))
            + ".</p>"
        )
    tile_html = "".join(
        f'<div class="tile"><div class="v">{html.escape(v)}</div><div>{html.escape(k)}</div></div>'
        for k, v in tiles
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        "<title>frontdesk report</title><style>"
        "body{font-family:sans-serif;margin:2em;color:#222}"
        ".tiles{display:flex;gap:1em;flex-wrap:wrap}"
        ".tile{border:1px solid #ccc;border-radius:6px;padding:.8em 1.2em;min-width:9em}"
        ".v{font-size:1.6em;font-weight:bold}"
        "table{border-collapse:collapse;margin-bottom:2em;font-size:.9em}"
        "th,td{border:1px solid #ddd;padding:.3em .6em;text-align:right}"
        "th:first-child{text-align:left}svg{display:block;margin:1.5em 0}"
        "</style></head><body>"
        f"<h1>Did it help? {html.escape(period)}</h1>"
        "<p>Resolved: confirmed (the customer, a handler or an operator said so) or assumed"
        " (no further message within a day of a bot answer). Containment: resolved without"
        " a person. Cost: each turn's model usage at list prices.</p>"
        f'<div class="tiles">{tile_html}</div>{note}'
        + "".join(charts)
        + "".join(sections)
        + "</body></html>"
    )
